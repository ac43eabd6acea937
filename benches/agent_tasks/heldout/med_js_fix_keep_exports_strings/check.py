import json
import os
import re
import shutil
import subprocess

task = os.path.join(os.environ["TASK_DIR"], "workspace")
assert open("table.js").read() == open(os.path.join(task, "table.js")).read(), "table.js was changed"
src = open("strings.js").read()
m = re.search(r"module\.exports\s*=\s*\{([^}]*)\}", src)
assert m, "strings.js no longer has module.exports = { ... }"
names = sorted(n.strip().split(":")[0].strip() for n in m.group(1).split(",") if n.strip())
assert names == ["capitalize", "pad", "plural", "titleCase"], "strings.js exports %s" % names
if shutil.which("node"):
    script = """
const s = require('./strings');
const t = require('./table');
console.log(JSON.stringify([s.capitalize('hello'), s.capitalize('a'), s.capitalize(''), s.titleCase('the QUICK fox'),
  s.pad('ab', 4), s.plural(1, 'file'), s.plural(3, 'file'), t.header(['name', 'size'], 6), t.footer([1, 2])]));
"""
    r = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout)
    want = ["Hello", "A", "", "The Quick Fox", "ab  ", "1 file", "3 files", "Name  |Size  ", "2 rows"]
    assert got == want, got
else:
    body = re.search(r"function capitalize\(word\)\s*\{(.*?)\n\}", src, re.S)
    assert body, "no function capitalize(word) in strings.js"
    b = body.group(1)
    ok = re.search(r"\.(slice|substring|substr)\(1\)", b) or re.search(r"\.charAt\(0\)\.toUpperCase\(\)\s*\+\s*word\.(slice|substring|substr)\(1\)", b)
    assert ok, "capitalize() still repeats the first letter (no node here to run it)"
print("ok")
