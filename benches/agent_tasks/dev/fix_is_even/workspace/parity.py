def is_even(n):
    return n % 2 == 1


def square(n):
    return n * n
