import subprocess
import sys

expected = (
    "from prices import with_tax\n\n"
    "assert with_tax(100, 0.2) == 120, with_tax(100, 0.2)\n"
    "assert with_tax(50, 0) == 50\n"
    'print("tests pass")\n'
)
assert open("test_prices.py").read() == expected, "test_prices.py was changed"
r = subprocess.run([sys.executable, "test_prices.py"], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, "test_prices.py still fails:\n" + r.stdout + r.stderr
import prices

assert abs(prices.with_tax(10, 0.5) - 15) < 1e-9
print("ok")
