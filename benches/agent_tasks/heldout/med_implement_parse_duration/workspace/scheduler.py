from durations import format_duration, parse_duration


def next_runs(start, every, count):
    """`count` start times (seconds) from `start`, every `every` (a duration string)."""
    step = parse_duration(every)
    return [start + i * step for i in range(count)]


def describe(every):
    return "runs every " + format_duration(parse_duration(every))
