from stats import *  # noqa: F401,F403


def latency_line(samples):
    return "p50 %.1f ms, p95 %.1f ms, mean %.1f ms" % (median(samples), percentile(samples, 95), mean(samples))  # noqa: F405
