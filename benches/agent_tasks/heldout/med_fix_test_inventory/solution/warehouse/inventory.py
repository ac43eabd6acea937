"""Stock levels of the warehouse."""


class OutOfStock(Exception):
    pass


class Inventory:
    def __init__(self):
        self.stock = {}

    def add(self, sku, qty):
        if qty <= 0:
            raise ValueError("qty must be positive")
        self.stock[sku] = self.stock.get(sku, 0) + qty

    def remove(self, sku, qty):
        have = self.stock.get(sku, 0)
        if qty > have:
            raise OutOfStock("%s: want %d, have %d" % (sku, qty, have))
        self.stock[sku] = have - qty
        if self.stock[sku] == 0:
            del self.stock[sku]

    def count(self, sku):
        return self.stock.get(sku, 0)

    def total_items(self):
        return sum(self.stock.values())
