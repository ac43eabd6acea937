import os
import shutil
import subprocess
import sys
import tempfile


def tree(root):
    out = set()
    for folder, _d, files in os.walk(root):
        for f in files:
            out.add(os.path.relpath(os.path.join(folder, f), root))
    return out


def fixture():
    d = tempfile.mkdtemp()
    for rel in ("a.tmp", "keep.txt", "sub/b.bak", "sub/c.py", "sub/deep/d~", "sub/deep/e.md"):
        p = os.path.join(d, rel)
        os.makedirs(os.path.dirname(p), exist_ok=True)
        open(p, "w").write("x\n")
    return d


def run(*args):
    r = subprocess.run([sys.executable, os.path.abspath("cleanup.py"), *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, "cleanup.py %s failed:\n%s" % (" ".join(args), r.stderr)
    return r.stdout


junk = {"a.tmp", os.path.join("sub", "b.bak"), os.path.join("sub", "deep", "d~")}
d = fixture()
before = tree(d)
out = run("--dry-run", d)
assert tree(d) == before, "--dry-run deleted files: %s" % sorted(before - tree(d))
for rel in junk:
    assert rel in out or os.path.join(d, rel) in out, "--dry-run does not list %s:\n%s" % (rel, out)
assert "keep.txt" not in out and "c.py" not in out, "--dry-run lists files that are not junk:\n" + out
run(d)
assert tree(d) == before - junk, "without --dry-run it no longer removes the junk: %s" % sorted(tree(d))
shutil.rmtree(d)
d = fixture()
before = tree(d)
assert run("--dry-run", "--quiet", d).strip() == "", "--dry-run --quiet printed something"
assert tree(d) == before
shutil.rmtree(d)
h = subprocess.run([sys.executable, "cleanup.py", "--help"], capture_output=True, text=True, timeout=30)
assert "--dry-run" in h.stdout, "--help does not mention --dry-run"
print("ok")
