def summarize(values):
    total = 0
    for v in values:
        total += v
    return "total: %d" % total
