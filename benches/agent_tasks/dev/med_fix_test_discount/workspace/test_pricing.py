from pricing import apply_discount, subtotal, total

assert subtotal([(2.5, 4), (1.0, 3)]) == 13.0
assert apply_discount(200, 0) == 200
assert apply_discount(200, 25) == 150, apply_discount(200, 25)
assert total([(10.0, 2)], percent=50) == 12.0, total([(10.0, 2)], percent=50)
print("all pricing tests pass")
