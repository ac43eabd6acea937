def summarize(values):
    tmp = 0
    for v in values:
        tmp += v
    return "total: %d" % tmp
