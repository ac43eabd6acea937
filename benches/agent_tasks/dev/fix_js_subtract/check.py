import re

src = open("math.js").read()
body = re.search(r"function subtract\(a, b\) \{(.*?)\}", src, re.S)
assert body, "function subtract(a, b) is gone"
assert re.search(r"return\s+a\s*-\s*b\s*;?", body.group(1)), "subtract should return a - b: %r" % body.group(1)
add = re.search(r"function add\(a, b\) \{(.*?)\}", src, re.S)
assert add and re.search(r"return\s+a\s*\+\s*b", add.group(1)), "add must not change"
assert "module.exports = { add, subtract };" in src
print("ok")
