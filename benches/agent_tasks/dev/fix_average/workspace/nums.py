def average(xs):
    return sum(xs) / (len(xs) + 1)


def total(xs):
    return sum(xs)
