import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))

from warehouse.inventory import Inventory, OutOfStock

inv = Inventory()
inv.add("apple", 10)
inv.add("pear", 4)
inv.remove("apple", 3)
inv.remove("pear", 4)
assert inv.count("pear") == 0 and "pear" not in inv.stock
try:
    inv.remove("apple", 8)
except OutOfStock:
    pass
else:
    raise AssertionError("removing more than we have must raise OutOfStock")
print("inventory tests pass")
