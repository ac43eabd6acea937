import os
import re
import shutil
import subprocess

task = os.path.join(os.environ["TASK_DIR"], "workspace")
assert open("report.js").read() == open(os.path.join(task, "report.js")).read(), "report.js was changed"
src = open("mathutils.js").read()
m = re.search(r"module\.exports\s*=\s*\{([^}]*)\}", src)
assert m, "mathutils.js no longer has module.exports = { ... }"
names = sorted(n.strip().split(":")[0].strip() for n in m.group(1).split(",") if n.strip())
assert names == ["average", "clamp", "lerp", "roundTo"], "mathutils.js exports %s" % names
if shutil.which("node"):
    script = """
const m = require('./mathutils');
const r = require('./report');
const out = [m.average([2, 4]), m.average([1, 2, 3, 4]), m.average([5]), m.average([]),
  m.clamp(12, 0, 10), m.lerp(0, 10, 0.25), m.roundTo(3.14159, 2), r.summary([3, 4, 5])];
console.log(JSON.stringify(out));
"""
    r = subprocess.run(["node", "-e", script], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    import json

    got = json.loads(r.stdout)
    assert got == [3, 2.5, 5, 0, 10, 2.5, 3.14, "mean 4 over 3 samples"], got
else:
    body = re.search(r"function average\(xs\)\s*\{(.*?)\n\}", src, re.S)
    assert body, "no function average(xs) in mathutils.js"
    b = body.group(1)
    ok = re.search(r"let i = 0\b", b) or re.search(r"reduce\(", b) or re.search(r"for \((const|let|var) \w+ of xs\)", b)
    assert ok, "average() still skips the first element (no node here to run it)"
print("ok")
