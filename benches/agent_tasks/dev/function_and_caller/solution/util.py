def half(x):
    return x / 2


def double(x):
    return x * 2
