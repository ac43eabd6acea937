import people

assert people.is_adult(18) is True, "is_adult(18) should be True"
assert people.is_adult(30) is True
assert people.is_adult(17) is False, "is_adult(17) should be False"
assert people.describe(18) == "adult"
assert people.describe(5) == "minor"
assert people.ADULT_AGE == 18, "ADULT_AGE should stay 18"
print("ok")
