PI = 3.14


def circumference(r):
    return 2 * PI * r
