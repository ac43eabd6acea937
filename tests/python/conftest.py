"""Fixtures: a running `agentd serve` (started here on a free port, or the one at $AGENTD_BASE_URL) and
official-SDK clients for it.

The binary is $AGENTD_BIN, else $CARGO_TARGET_DIR/release/agentd, else target/release/agentd. The model must be
in the cache or fetchable (CI pulls it first).
"""

import os
import re
import subprocess
import threading
import time
from pathlib import Path

import json
import urllib.error
import urllib.request

import openai
import pytest

API_KEY = "sk-agentd-test"
ROOT = Path(__file__).resolve().parents[2]


def binary() -> str:
    if os.environ.get("AGENTD_BIN"):
        return os.environ["AGENTD_BIN"]
    target = os.environ.get("CARGO_TARGET_DIR", str(ROOT / "target"))
    path = Path(target) / "release" / "agentd"
    if not path.exists():
        pytest.exit(f"{path} does not exist: run `cargo build --release` first (or set AGENTD_BIN)", 2)
    return str(path)


class Server:
    """One `agentd serve` process on a free port; its stderr is kept for failure messages."""

    def __init__(self, *extra: str, api_key: str | None = API_KEY):
        key = ["--api-key", api_key] if api_key else []
        self.proc = subprocess.Popen(
            [binary(), "serve", "--port", "0", *key, *extra],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self.stderr: list[str] = []
        threading.Thread(target=self._drain_stderr, daemon=True).start()
        deadline = time.time() + 600  # a fresh machine fetches the model first
        line = ""
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            m = re.search(r"http://(127\.0\.0\.1:\d+)", line)
            if m:
                self.root = f"http://{m.group(1)}"
                break
        else:
            line = ""
        if not getattr(self, "root", None):
            self.stop()
            raise RuntimeError("agentd serve did not start:\n" + "".join(self.stderr[-40:]))
        self.base_url = self.root + "/v1"

    def _drain_stderr(self):
        for line in self.proc.stderr:
            self.stderr.append(line)

    def stop(self):
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@pytest.fixture(scope="session")
def server():
    """The server under test: $AGENTD_BASE_URL (e.g. http://127.0.0.1:8080/v1) or one started here."""
    url = os.environ.get("AGENTD_BASE_URL")
    if url:
        s = Server.__new__(Server)
        s.base_url = url.rstrip("/")
        s.root = s.base_url.removesuffix("/v1")
        s.proc = None
        yield s
        return
    s = Server()
    yield s
    s.stop()
    assert s.proc.returncode == 0, "agentd serve did not shut down cleanly:\n" + "".join(s.stderr[-40:])


@pytest.fixture(scope="session")
def tight_server():
    """A second server admitting one request at a time, with no queue and a small body limit: 503 and 413 are
    reachable."""
    s = Server("--max-running", "1", "--max-queue", "0", "--max-body-bytes", "100000")
    yield s
    s.stop()


@pytest.fixture(scope="session")
def client(server):
    return openai.OpenAI(base_url=server.base_url, api_key=os.environ.get("AGENTD_API_KEY", API_KEY), max_retries=0, timeout=300)


class Response:
    def __init__(self, status_code, headers, body: bytes):
        self.status_code = status_code
        self.headers = {k.lower(): v for k, v in headers.items()}
        self.text = body.decode("utf-8", "replace")

    def json(self):
        return json.loads(self.text)


class Http:
    """A minimal HTTP client (the standard library's) for raw requests the SDK cannot send."""

    def __init__(self, root: str, key: str | None):
        self.root = root
        self.key = key

    def request(self, method, path, json_body=None, content=None, headers=None):
        data = content if content is not None else (None if json_body is None else json.dumps(json_body).encode())
        h = {"Content-Type": "application/json"}
        if self.key:
            h["Authorization"] = f"Bearer {self.key}"
        h.update(headers or {})
        url = path if path.startswith("http") else self.root + path
        req = urllib.request.Request(url, data=data, method=method, headers=h)
        try:
            with urllib.request.urlopen(req, timeout=300) as r:
                return Response(r.status, dict(r.headers), r.read())
        except urllib.error.HTTPError as e:
            return Response(e.code, dict(e.headers), e.read())

    def get(self, path, **kw):
        return self.request("GET", path, **kw)

    def post(self, path, json=None, content=None, headers=None):
        return self.request("POST", path, json_body=json, content=content, headers=headers)


@pytest.fixture(scope="session")
def http(server):
    return Http(server.root, os.environ.get("AGENTD_API_KEY", API_KEY))


@pytest.fixture(scope="session")
def anon(server):
    """Raw requests without a key."""
    return Http(server.root, None)


@pytest.fixture(scope="session")
def model(client):
    return client.models.list().data[0].id
