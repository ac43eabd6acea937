from constants import PI


def circumference(r):
    return 2 * PI * r
