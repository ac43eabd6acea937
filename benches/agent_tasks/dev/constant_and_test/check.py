import re
import subprocess
import sys

import pricing

assert pricing.DISCOUNT == 15, "DISCOUNT is %r" % pricing.DISCOUNT
src = open("test_pricing.py").read()
assert re.search(r"discounted\(200\)\s*==\s*170(\.0)?\b", src), "test_pricing.py does not expect 170: %r" % src
r = subprocess.run([sys.executable, "test_pricing.py"], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, r.stdout + r.stderr
print("ok")
