"""The settings `agentd clients` prints, applied for a test: every config file written under a temporary home
(`~` is that home; a file whose directory an environment variable moves goes there and the variable is set),
and the environment the client runs with."""

import json
import subprocess
from pathlib import Path

from conftest import binary


def printed(server_root, name, key=None, model=None, window=None):
    """`agentd clients NAME --json` for the server at `server_root`: the one client's setup."""
    cmd = [binary(), "clients", name, "--json", "--url", server_root]
    if key:
        cmd += ["--api-key", key]
    if model:
        cmd += ["--model", model]
    if window:
        cmd += ["--window", str(window)]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)["clients"][0]


def apply(setup, home: Path):
    """Writes `setup`'s files under `home`; the environment (HOME, the directory variables, the client's own
    variables) to run the client with."""
    env = {"HOME": str(home)}
    for f in setup["files"]:
        rel = f["path"].removeprefix("~/")
        path = home / rel
        if f.get("dir_env"):
            env[f["dir_env"]] = str(path.parent)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f["content"])
    env.update(dict(setup["env"]))
    return env


def command(setup, home: Path):
    """The printed command line with `~` made the temporary home."""
    return [w.replace("~/", f"{home}/", 1) if w.startswith("~/") else w for w in setup["command"]]
