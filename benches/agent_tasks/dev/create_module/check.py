import os

assert os.path.exists("units.py"), "units.py was not created"
import units

assert abs(units.km_to_miles(10) - 6.21371) < 1e-9, "km_to_miles(10) is %r" % units.km_to_miles(10)
assert units.km_to_miles(0) == 0
print("ok")
