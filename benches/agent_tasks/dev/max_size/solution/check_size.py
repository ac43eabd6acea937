from limits import MAX_SIZE


def too_big(n):
    return n > MAX_SIZE
