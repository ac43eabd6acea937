import text

assert text.is_palindrome("level") is True
assert text.is_palindrome("abc") is False
assert text.is_palindrome("") is True
assert text.shout("hi") == "HI!"
print("ok")
