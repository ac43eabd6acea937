def compute_total(prices):
    return sum(prices)


def checkout(prices):
    return "Total: %d" % compute_total(prices)
