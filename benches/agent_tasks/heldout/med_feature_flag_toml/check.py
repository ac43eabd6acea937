import importlib
import os
import re
import shutil
import sys
import tempfile
import tomllib

task = os.path.join(os.environ["TASK_DIR"], "workspace")
with open("config.toml", "rb") as f:
    cfg = tomllib.load(f)
with open(os.path.join(task, "config.toml"), "rb") as f:
    old = tomllib.load(f)
assert cfg["features"].get("dark_mode") is True, "config.toml [features] has dark_mode = %r" % cfg["features"].get("dark_mode")
old["features"]["dark_mode"] = True
assert cfg == old, "config.toml changed beyond the new flag: %s" % cfg
assert re.search(r"^DARK_MODE\s*=", open("settings.py").read(), re.M), "settings.py has no DARK_MODE like the other flags"
import settings
import ui

assert settings.DARK_MODE is True
assert settings.enabled_features() == ["dark_mode", "markdown_preview", "sync"], settings.enabled_features()
assert ui.theme() == "dark", ui.theme()
assert ui.header() == "notes (dark_mode, markdown_preview, sync)", ui.header()
# With the flag switched off, settings.py must read it from the file (not hard-code it) and the theme is light.
d = tempfile.mkdtemp()
for f in ("settings.py", "ui.py"):
    shutil.copy(f, d)
open(os.path.join(d, "config.toml"), "w").write(open("config.toml").read().replace("dark_mode = true", "dark_mode = false"))
sys.path.insert(0, d)
for m in ("settings", "ui"):
    del sys.modules[m]
settings2 = importlib.import_module("settings")
ui2 = importlib.import_module("ui")
assert settings2.__file__.startswith(d)
assert settings2.DARK_MODE is False, "DARK_MODE does not follow config.toml"
assert ui2.theme() == "light", "theme() is %r with dark_mode off" % ui2.theme()
shutil.rmtree(d)
print("ok")
