import os
import shutil
import subprocess
import tempfile

d = tempfile.mkdtemp()
shutil.copy("backup.sh", d)
notes = {"a.txt": "A\n", "sub/b.txt": "B\n", "sub/deeper/c.txt": "C\n", "sub/readme.md": "no\n", "x.txt.old": "no\n"}
for rel, text in notes.items():
    p = os.path.join(d, "notes", rel)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").write(text)
env = dict(os.environ, BACKUP_DATE="2024-06-01")
r = subprocess.run(["bash", "backup.sh"], cwd=d, env=env, capture_output=True, text=True, timeout=60)
assert r.returncode == 0, "backup.sh failed:\n" + r.stdout + r.stderr
dest = os.path.join(d, "backup", "2024-06-01")
got = set()
for folder, _dirs, files in os.walk(dest):
    for f in files:
        got.add(os.path.relpath(os.path.join(folder, f), dest))
want = {"a.txt", "sub/b.txt", "sub/deeper/c.txt", "MANIFEST"}
assert got == want, "backup/2024-06-01 holds %s, expected %s" % (sorted(got), sorted(want))
for rel in ("a.txt", "sub/b.txt", "sub/deeper/c.txt"):
    assert open(os.path.join(dest, rel)).read() == notes[rel], rel + " was not copied as it is"
manifest = sorted(open(os.path.join(dest, "MANIFEST")).read().split())
assert manifest == ["a.txt", "sub/b.txt", "sub/deeper/c.txt"], "MANIFEST lists %s" % manifest
assert "backed up 3 notes" in r.stdout, "the script says: " + r.stdout
shutil.rmtree(d)
print("ok")
