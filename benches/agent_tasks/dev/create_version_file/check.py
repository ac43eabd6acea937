import os

assert os.path.exists("VERSION"), "VERSION was not created"
assert open("VERSION").read().strip() == "1.2.3", "VERSION holds %r" % open("VERSION").read()
print("ok")
