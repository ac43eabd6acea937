import os
import shutil
import subprocess
import sys
import tempfile

assert os.path.exists("test_strings.py"), "test_strings.py was not created"
src = open("test_strings.py").read()
assert "assert" in src and "reverse" in src, "test_strings.py must assert on reverse"
r = subprocess.run([sys.executable, "test_strings.py"], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, "test_strings.py fails on the correct strings.py:\n" + r.stdout + r.stderr
d = tempfile.mkdtemp()
try:
    shutil.copy("test_strings.py", d)
    open(os.path.join(d, "strings.py"), "w").write("def reverse(s):\n    return s\n")
    r = subprocess.run([sys.executable, "test_strings.py"], cwd=d, capture_output=True, text=True, timeout=30)
    assert r.returncode != 0, "test_strings.py passes when reverse does nothing: it does not test reverse"
finally:
    shutil.rmtree(d)
print("ok")
