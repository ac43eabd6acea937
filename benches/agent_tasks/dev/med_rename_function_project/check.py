import io
import re
import subprocess
import sys

for f in ("settings.py", "app.py", "cli.py"):
    assert not re.search(r"\bload_cfg\b", open(f).read()), "load_cfg is still in " + f
assert re.search(r"^def load_config\(", open("settings.py").read(), re.M), "settings.py defines no load_config"
import app
import settings

assert settings.load_config("host = example.org\n")["host"] == "example.org"
assert app.address("port=1\n") == "localhost:1", app.address("port=1\n")
assert app.banner("debug=true\n") == "serving on localhost:8000 (debug)", app.banner("debug=true\n")
r = subprocess.run([sys.executable, "cli.py", "example.cfg"], capture_output=True, text=True, timeout=30)
assert r.returncode == 0, r.stderr
assert r.stdout == "debug = yes\nhost = localhost\nport = 9000\n", r.stdout
print("ok")
