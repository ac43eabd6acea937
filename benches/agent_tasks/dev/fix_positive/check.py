import signs
assert signs.is_positive(5) is True
assert signs.is_positive(-2) is False
assert signs.is_zero(0)
print("ok")
