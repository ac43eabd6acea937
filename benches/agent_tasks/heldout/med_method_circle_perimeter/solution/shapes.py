"""Shapes for the floor-plan calculator. Lengths are in metres."""

import math


class Square:
    def __init__(self, side):
        self.side = side

    def area(self):
        return self.side * self.side

    def perimeter(self):
        return 4 * self.side

    def scaled(self, factor):
        return Square(self.side * factor)


class Circle:
    def __init__(self, radius):
        self.radius = radius

    def area(self):
        return math.pi * self.radius ** 2

    def perimeter(self):
        return 2 * math.pi * self.radius

    def scaled(self, factor):
        return Circle(self.radius * factor)


def total_area(shapes):
    return sum(s.area() for s in shapes)
