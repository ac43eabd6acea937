import calc

assert calc.add(2, 3) == 5, "add(2, 3) should be 5"
assert calc.add(-4, 1) == -3, "add(-4, 1) should be -3"
assert calc.add(0, 0) == 0
# the other function is untouched
assert calc.sub(5, 3) == 2, "sub(5, 3) should still be 2"
print("ok")
