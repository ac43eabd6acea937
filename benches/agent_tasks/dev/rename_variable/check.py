import re
import report

src = open("report.py").read()
assert not re.search(r"\btmp\b", src), "tmp is still in report.py"
assert re.search(r"\btotal\b\s*=\s*0", src), "no `total = 0` in report.py"
assert report.summarize([1, 2, 3]) == "total: 6"
print("ok")
