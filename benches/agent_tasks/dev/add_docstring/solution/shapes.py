def area(width, height):
    """Return the area of a rectangle of the given width and height."""
    return width * height


def perimeter(width, height):
    return 2 * (width + height)
