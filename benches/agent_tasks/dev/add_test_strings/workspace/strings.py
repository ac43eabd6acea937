def reverse(s):
    return s[::-1]
