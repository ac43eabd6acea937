import os
import subprocess
import sys

task = os.environ["TASK_DIR"]
orig = open(os.path.join(task, "workspace", "test_pricing.py")).read()
assert open("test_pricing.py").read() == orig, "test_pricing.py was changed"
r = subprocess.run([sys.executable, "test_pricing.py"], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, "test_pricing.py still fails:\n" + r.stdout + r.stderr
import pricing

assert abs(pricing.apply_discount(80, 10) - 72) < 1e-9, pricing.apply_discount(80, 10)
assert abs(pricing.apply_discount(50, 100)) < 1e-9
for bad in (-1, 101):
    try:
        pricing.apply_discount(10, bad)
    except ValueError:
        pass
    else:
        raise AssertionError("apply_discount(10, %d) no longer raises ValueError" % bad)
assert pricing.total([(5.0, 3)]) == 18.0, pricing.total([(5.0, 3)])
assert pricing.total([(19.99, 1)], percent=10) == 21.59, pricing.total([(19.99, 1)], percent=10)
print("ok")
