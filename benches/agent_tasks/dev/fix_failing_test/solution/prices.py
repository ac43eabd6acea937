def with_tax(price, rate):
    return price * (1 + rate)
