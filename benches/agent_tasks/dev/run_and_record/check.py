import os

assert os.path.exists("result.txt"), "result.txt was not created"
assert open("result.txt").read().strip() == "140", "result.txt holds %r" % open("result.txt").read()
print("ok")
