def sum_to(n):
    """Return 1 + 2 + ... + n."""
    total = 0
    for i in range(1, n + 1):
        total += i
    return total


if __name__ == "__main__":
    print(sum_to(10))
