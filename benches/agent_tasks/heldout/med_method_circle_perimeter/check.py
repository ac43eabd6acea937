import math

import plan
from shapes import Circle, Square

assert abs(Circle(1).perimeter() - 2 * math.pi) < 1e-9, Circle(1).perimeter()
assert abs(Circle(2.5).perimeter() - 5 * math.pi) < 1e-9
assert abs(Circle(3).scaled(2).perimeter() - 12 * math.pi) < 1e-9
assert Square(3).perimeter() == 12 and Square(3).area() == 9, "Square changed"
assert abs(Circle(1).area() - math.pi) < 1e-9, "Circle.area changed"
assert abs(plan.skirting_length(plan.ROOMS) - (16 + 12 + 4 * math.pi)) < 1e-9
print("ok")
