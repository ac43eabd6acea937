def with_tax(price, rate):
    return price * rate
