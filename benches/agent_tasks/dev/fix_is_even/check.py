import parity

assert parity.is_even(4) is True, "is_even(4) should be True"
assert parity.is_even(7) is False, "is_even(7) should be False"
assert parity.is_even(0) is True
assert parity.square(3) == 9
print("ok")
