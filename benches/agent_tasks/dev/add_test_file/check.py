import os
import shutil
import subprocess
import sys
import tempfile

# Run test_calc.py as a script, then call any test_* functions it defines (so both plain top-level asserts and
# pytest-style functions count).
RUN = (
    "import runpy\n"
    "ns = runpy.run_path('test_calc.py', run_name='__main__')\n"
    "for name in sorted(ns):\n"
    "    if name.startswith('test') and callable(ns[name]):\n"
    "        ns[name]()\n"
)

assert os.path.exists("test_calc.py"), "test_calc.py was not created"
src = open("test_calc.py").read()
assert "assert" in src, "test_calc.py has no assert"
assert "add" in src, "test_calc.py does not use add"

import calc  # noqa: E402

assert calc.add(2, 3) == 5 and calc.mul(2, 3) == 6, "calc.py must keep working"

# The tests pass on the right calc.py ...
r = subprocess.run([sys.executable, "-c", RUN], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, "test_calc.py fails on the correct calc.py:\n" + r.stdout + r.stderr

# ... and fail when add is broken (so they really test add).
d = tempfile.mkdtemp()
try:
    shutil.copy("test_calc.py", d)
    with open(os.path.join(d, "calc.py"), "w") as f:
        f.write("def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n")
    r = subprocess.run([sys.executable, "-c", RUN], cwd=d, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, "test_calc.py still passes when add returns a - b: it does not test add"
finally:
    shutil.rmtree(d)
print("ok")
