from shapes import Circle, Square, total_area


def skirting_length(shapes):
    """Metres of skirting board for all the rooms."""
    return sum(s.perimeter() for s in shapes)


ROOMS = [Square(4), Square(3), Circle(2)]

if __name__ == "__main__":
    print("area %.2f m2, skirting %.2f m" % (total_area(ROOMS), skirting_length(ROOMS)))
