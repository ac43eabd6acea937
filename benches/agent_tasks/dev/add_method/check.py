import rect

r = rect.Rect(3, 5)
assert hasattr(r, "area"), "Rect has no area method"
assert r.area() == 15, "Rect(3, 5).area() is %r" % r.area()
assert (r.width, r.height) == (3, 5)
print("ok")
