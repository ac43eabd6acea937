import geometry

assert geometry.area(3, 4) == 12, "area(3, 4) should be 12, got %r" % geometry.area(3, 4)
assert geometry.area(0, 5) == 0
assert geometry.perimeter(3, 4) == 14, "perimeter must not change"
print("ok")
