from prices import with_tax

assert with_tax(100, 0.2) == 120, with_tax(100, 0.2)
assert with_tax(50, 0) == 50
print("tests pass")
