"""Schema-driven fuzzing: schemathesis generates requests for every operation of `GET /openapi.json` (valid
and invalid bodies, path and query values, wrong methods) against a real `agentd serve` on the default model,
time-boxed by $AGENTD_SCHEMATHESIS_SECS (default 150 s; the longer run for a note: `AGENTD_SCHEMATHESIS_SECS=1200`).

Checks: no 5xx (the run stays below the admission queue, so not even 503), every status, content type and body
as the document declares them (so every error is in its door's shape: OpenAI's, Anthropic's or Ollama's), no
request past the 60 s request timeout, and the server still healthy afterwards with bounded memory. Lengths are
capped in the hooks (tests/python/fuzz/schemathesis_hooks.py); the server runs without an API key, so agent
sessions that could run commands are refused (403) rather than run whatever a fuzzer's prompt asks.

schemathesis is required when AGENTD_REQUIRE_CLIENTS=1 (CI); otherwise a missing install skips.
"""

import json
import os
import shutil
import subprocess
import sys
import urllib.request
from pathlib import Path

import pytest

from conftest import Server

HERE = Path(__file__).resolve().parent


def schemathesis_cli() -> str:
    exe = Path(sys.executable).parent / "schemathesis"
    if exe.exists():
        return str(exe)
    found = shutil.which("schemathesis")
    if found:
        return found
    if os.environ.get("AGENTD_REQUIRE_CLIENTS") == "1":
        pytest.fail("schemathesis is not installed (pip install schemathesis)")
    pytest.skip("schemathesis is not installed")


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def test_every_route_fuzzed_from_the_published_schema(tmp_path):
    cli = schemathesis_cli()
    secs = int(os.environ.get("AGENTD_SCHEMATHESIS_SECS", "150"))
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    (workspace / "notes.txt").write_text("a file for read-only sessions\n")
    server = Server(
        "--max-model-len", "512",
        "--sessions-dir", str(tmp_path / "sessions"),
        "--workspace", str(workspace),
        "--offline",
        "--pooling", "mean",
        api_key=None,
    )
    try:
        with urllib.request.urlopen(server.root + "/v1/models") as r:
            model = json.load(r)["data"][0]["id"]
        stats = tmp_path / "stats.json"
        env = dict(
            os.environ,
            SCHEMATHESIS_HOOKS="schemathesis_hooks",
            PYTHONPATH=str(HERE / "fuzz"),
            AGENTD_FUZZ_MODEL=model,
            AGENTD_FUZZ_STATS=str(stats),
        )
        cmd = [
            cli, "run", server.root + "/openapi.json",
            "--checks", "not_a_server_error,status_code_conformance,content_type_conformance,"
                        "response_schema_conformance,unsupported_method",
            "--max-time", str(secs),
            "--request-timeout", "60",
            "--workers", "2",
            "--seed", os.environ.get("AGENTD_SCHEMATHESIS_SEED", "7"),
            "--generation-database", "none",
            "--no-color",
        ]
        run = subprocess.run(cmd, env=env, cwd=tmp_path, capture_output=True, text=True, timeout=secs + 300)
        out = run.stdout + run.stderr
        summary = json.loads(stats.read_text()) if stats.exists() else {}
        print(out[-3000:])
        print("statuses:", summary.get("statuses"))
        for route, counts in sorted(summary.get("routes", {}).items()):
            print(f"  {route}: {dict(sorted(counts.items()))}")
        assert run.returncode == 0, out[-12000:] + "\n--- server stderr ---\n" + "".join(server.stderr[-40:])
        statuses = summary.get("statuses", {})
        assert sum(statuses.values()) > 200, statuses
        assert not any(s.startswith("5") for s in statuses), statuses
        # Requests reached past validation to real answers on the model doors, not only refusals.
        routes = summary.get("routes", {})
        for route in ("POST /v1/completions", "POST /api/generate", "POST /tokenize", "POST /api/embed"):
            assert routes.get(route, {}).get("200", 0) > 0, (route, routes.get(route))
        # Still serving, with bounded memory.
        with urllib.request.urlopen(server.root + "/health") as r:
            assert r.status == 200
        assert server.proc.poll() is None
        assert rss_mb(server.proc.pid) < 2048
    finally:
        server.stop()
