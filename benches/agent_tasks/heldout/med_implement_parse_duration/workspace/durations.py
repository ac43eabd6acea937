"""Parsing the durations users type in the job scheduler: "90s", "5m", "1h30m", "2d"."""

UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(text):
    """Seconds in `text`: one or more <integer><unit> parts, units s, m, h, d (e.g. "1h30m" == 5400),
    spaces around the text ignored. Raises ValueError on anything else (empty text, a unit we don't know,
    a number without a unit)."""
    raise NotImplementedError


def format_duration(seconds):
    """The inverse for display: 5400 -> "1h30m"; 0 -> "0s"."""
    if seconds == 0:
        return "0s"
    out = ""
    for unit in ("d", "h", "m", "s"):
        n, seconds = divmod(seconds, UNITS[unit])
        if n:
            out += "%d%s" % (n, unit)
    return out
