"""Summary statistics for the metrics page."""

__all__ = ["mean", "median", "percentile", "spread"]


def mean(values):
    values = list(values)
    if not values:
        raise ValueError("mean of no values")
    return sum(values) / len(values)


def median(values):
    values = sorted(values)
    if not values:
        raise ValueError("median of no values")
    mid = len(values) // 2
    if len(values) % 2 == 0:
        return (values[mid - 1] + values[mid]) / 2
    return values[mid]


def percentile(values, p):
    """Nearest-rank percentile, 0 < p <= 100."""
    values = sorted(values)
    if not values or not 0 < p <= 100:
        raise ValueError("bad percentile request")
    rank = max(1, -(-p * len(values) // 100))
    return values[int(rank) - 1]


def spread(values):
    values = list(values)
    return max(values) - min(values)


def _debug_dump(values):
    print(sorted(values))
