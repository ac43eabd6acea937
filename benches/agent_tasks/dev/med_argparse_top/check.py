import subprocess
import sys


def run(*args):
    r = subprocess.run([sys.executable, "top_words.py", "sample.txt", *args], capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, "top_words.py %s failed:\n%s" % (" ".join(args), r.stderr)
    return r.stdout.splitlines()


full = run()
assert full[:4] == ["the 11", "cat 5", "garden 4", "in 3"], full[:4]
assert len(full) == 15, "without --top it prints %d lines, not all 15 words" % len(full)
assert run("--top", "3") == full[:3], run("--top", "3")
assert run("--top", "1") == ["the 11"], run("--top", "1")
assert run("--top", "50") == full
long_words = [l for l in full if len(l.split()[0]) >= 5]
assert run("--top", "2", "--min-length", "5") == long_words[:2], run("--top", "2", "--min-length", "5")
assert run("--min-length", "5") == long_words
h = subprocess.run([sys.executable, "top_words.py", "--help"], capture_output=True, text=True, timeout=30)
assert "--top" in h.stdout, "--help does not mention --top"
print("ok")
