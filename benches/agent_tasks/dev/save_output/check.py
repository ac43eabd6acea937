import os
assert os.path.exists("output.txt"), "no output.txt"
assert open("output.txt").read().strip() == "hi there", open("output.txt").read()
assert open("hello.py").read() == 'print("hi " + "there")\n'
print("ok")
