def too_big(n):
    return n > 100
