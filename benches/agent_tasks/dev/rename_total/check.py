import cart
src = open("cart.py").read()
assert "get_total" not in src, src
assert cart.compute_total([1, 2]) == 3
assert cart.checkout([1, 2]) == "Total: 3"
print("ok")
