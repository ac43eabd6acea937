from strings import reverse

assert reverse("abc") == "cba"
assert reverse("") == ""
print("ok")
