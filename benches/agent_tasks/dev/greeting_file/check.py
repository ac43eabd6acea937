import os
assert open("greeting.txt").read().strip() == "Hello, world"
print("ok")
