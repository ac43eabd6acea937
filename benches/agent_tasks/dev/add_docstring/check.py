import shapes

doc = shapes.area.__doc__
assert doc and doc.strip(), "area has no docstring"
assert "area" in doc.lower() or "rectangle" in doc.lower(), "the docstring should mention the area of a rectangle"
assert shapes.area(3, 4) == 12, "area must still return width * height"
assert shapes.perimeter(3, 4) == 14, "perimeter must not change"
print("ok")
