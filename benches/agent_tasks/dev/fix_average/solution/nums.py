def average(xs):
    return sum(xs) / len(xs)


def total(xs):
    return sum(xs)
