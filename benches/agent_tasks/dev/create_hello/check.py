import os

assert os.path.exists("hello.txt"), "hello.txt was not created"
assert open("hello.txt").read().strip() == "Hello, world!", "hello.txt holds %r" % open("hello.txt").read()
assert open("README.md").read().startswith("# Greetings")
print("ok")
