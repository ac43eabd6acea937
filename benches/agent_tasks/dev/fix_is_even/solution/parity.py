def is_even(n):
    return n % 2 == 0


def square(n):
    return n * n
