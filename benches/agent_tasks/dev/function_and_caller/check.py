import util
import main

assert util.double(4) == 8, "double(4) is %r" % util.double(4)
assert util.half(4) == 2
assert main.run() == 42, "run() returns %r" % main.run()
assert "double" in open("main.py").read(), "main.py does not use double"
print("ok")
