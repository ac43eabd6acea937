import limits, check_size
assert limits.MAX_SIZE == 100
assert limits.MIN_SIZE == 1, "MIN_SIZE must stay"
src = open("check_size.py").read()
assert "MAX_SIZE" in src and "100" not in src, src
assert check_size.too_big(101) and not check_size.too_big(100)
print("ok")
