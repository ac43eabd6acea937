def is_positive(n):
    return n > 0


def is_zero(n):
    return n == 0
