DISCOUNT = 15


def discounted(price):
    return price - price * DISCOUNT / 100
