class Cart:
    def __init__(self):
        self.lines = []

    def add(self, name, price, qty=1):
        self.lines.append((name, price, qty))

    def total(self):
        return sum(price * qty for _, price, qty in self.lines)
