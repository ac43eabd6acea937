DISCOUNT = 10


def discounted(price):
    return price - price * DISCOUNT / 100
