import calc

assert hasattr(calc, "multiply"), "calc.multiply does not exist"
assert calc.multiply(3, 4) == 12
assert calc.multiply(-2, 5) == -10
assert calc.multiply(7, 0) == 0
assert calc.add(2, 3) == 5, "add must still work"
print("ok")
