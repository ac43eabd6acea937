import shop

src = open("shop.py").read()
assert "calc_total" not in src, "the old name calc_total is still in shop.py"
assert hasattr(shop, "total_price"), "shop.total_price does not exist"
assert shop.total_price(["apple", "milk"]) == 5
assert shop.receipt(["bread", "bread"]) == "Total: 10"
print("ok")
