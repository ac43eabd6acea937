PRICES = {"apple": 3, "bread": 5, "milk": 2}


def total_price(items):
    total = 0
    for item in items:
        total += PRICES[item]
    return total


def receipt(items):
    return "Total: %d" % total_price(items)
