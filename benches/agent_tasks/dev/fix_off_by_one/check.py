import series

assert series.sum_to(3) == 6, "sum_to(3) should be 6, got %r" % series.sum_to(3)
assert series.sum_to(1) == 1
assert series.sum_to(10) == 55
assert series.sum_to(0) == 0
print("ok")
