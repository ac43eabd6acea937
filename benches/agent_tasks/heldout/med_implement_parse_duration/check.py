import re

src = open("durations.py").read()
assert not re.search(r"raise\s+NotImplementedError", src), "the stub's raise NotImplementedError is still there"
import scheduler
from durations import format_duration, parse_duration

cases = {"90s": 90, "5m": 300, "1h30m": 5400, "2d": 172800, " 1h ": 3600, "1d2h3m4s": 93784, "0s": 0, "10m5s": 605}
for text, want in cases.items():
    got = parse_duration(text)
    assert got == want, "parse_duration(%r) == %r, expected %r" % (text, got, want)
for bad in ("", "  ", "5", "5x", "h", "1h30", "-5m", "1.5h"):
    try:
        got = parse_duration(bad)
    except ValueError:
        continue
    raise AssertionError("parse_duration(%r) returned %r instead of raising ValueError" % (bad, got))
assert format_duration(5400) == "1h30m"
assert scheduler.next_runs(100, "1m", 3) == [100, 160, 220]
assert scheduler.describe("90m") == "runs every 1h30m"
print("ok")
