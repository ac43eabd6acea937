import re

import constants

assert constants.PI == 3.14159, "constants.PI is %r" % constants.PI
src = open("circle.py").read()
assert re.search(r"from\s+constants\s+import\s+PI|import\s+constants", src), "circle.py does not import from constants"
assert not re.search(r"^PI\s*=", src, re.M), "circle.py still defines PI"
import circle

assert abs(circle.circumference(1) - 2 * 3.14159) < 1e-9
print("ok")
