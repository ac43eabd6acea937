def shout(s):
    return s.upper() + "!"


def is_palindrome(s):
    return s == s[::-1]
