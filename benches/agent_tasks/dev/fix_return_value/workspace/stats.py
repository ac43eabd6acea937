def max_of(items):
    best = items[0]
    for x in items:
        if x < best:
            best = x
    return best


def mean(items):
    return sum(items) / len(items)
