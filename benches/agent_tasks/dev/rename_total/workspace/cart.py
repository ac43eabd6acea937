def get_total(prices):
    return sum(prices)


def checkout(prices):
    return "Total: %d" % get_total(prices)
