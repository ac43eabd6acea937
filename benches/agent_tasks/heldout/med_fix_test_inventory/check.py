import os
import subprocess
import sys

task = os.path.join(os.environ["TASK_DIR"], "workspace")
assert open("tests/test_inventory.py").read() == open(os.path.join(task, "tests/test_inventory.py")).read(), "the test was changed"
r = subprocess.run([sys.executable, "tests/test_inventory.py"], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, "tests/test_inventory.py still fails:\n" + r.stdout + r.stderr
from warehouse.inventory import Inventory, OutOfStock
from warehouse.orders import fulfil

inv = Inventory()
inv.add("a", 5)
inv.add("b", 2)
inv.add("a", 1)
assert fulfil(inv, {"a": 4, "b": 3}) == ["b"]
assert inv.count("a") == 2 and inv.count("b") == 2, inv.stock
inv.remove("a", 2)
assert "a" not in inv.stock and inv.total_items() == 2
try:
    inv.add("c", 0)
except ValueError:
    pass
else:
    raise AssertionError("add(qty=0) no longer raises ValueError")
print("ok")
