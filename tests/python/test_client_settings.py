"""The settings `agentd clients` prints, applied unchanged to the real clients (scripts/install-clients.sh):
each client then knows the served model and its window.

- Every client (Claude Code, Codex CLI, Pi, Continue's `cn` with an OpenAI and with an Ollama model, OpenCode) finishes a task through `agentd serve` with
  its printed settings and no complaint about an unknown model: Claude Code's "doesn't recognize the model" notice
  and Codex's "Model metadata … not found" are gone, and Claude Code reports the served window and reply size as
  its own. The model is the scripted one of `scripted_model.py` behind agentd's remote provider, so the run is
  about the client's settings, not a small model's choices.
- A long Pi session against a small window (`agentd serve --max-model-len`) compacts on the client side before the
  window is full; without the settings the same session runs into the server's window instead.

aider's settings are checked on the real model in test_clients.py (its edit format needs a model that writes).
"""

import json
import os
import re
import secrets
import subprocess
from pathlib import Path

import pytest

from client_settings import apply, command, printed
from conftest import API_KEY, Server
from scripted_model import MODEL, ScriptedModel
from test_clients import client_path, json_lines, run

NOTICES = ["doesn't recognize the model", "Model metadata for", "Unknown context window"]


def remote_config(path: Path, model: ScriptedModel) -> Path:
    # The embedded SmolLM2 tokenizer counts the prompts (the scripted model has no /tokenize).
    path.write_text(f"""
provider = "remote"

[remote]
base_url = "{model.base_url}"
model = "{MODEL}"
tokenizer = "smollm2-135m-instruct"

[remote.compat]
tokenize_endpoint = false
""")
    return path


@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    # A window large enough that no request is cut to fit: what a client asks for reaches the model as it is.
    model = ScriptedModel(window=BIG_WINDOW)
    server = Server("--config", str(remote_config(tmp_path_factory.mktemp("agentd") / "remote.toml", model)))
    yield model, server
    server.stop()
    model.stop()


def workspace(tmp_path: Path, files: dict[str, str]) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir()
    for name, text in files.items():
        (ws / name).write_text(text)
    # OpenCode takes the project from git (and the directory from $PWD).
    subprocess.run(["git", "init", "-q", str(ws)], check=True)
    return ws


PROMPT = "Read the file secret.txt and tell me the secret word."
BIG_WINDOW = 200_000

# name → (the arguments after the printed command that run one prompt without a person, the binary's name)
HEADLESS = {
    "claude-code": (lambda p: ["-p", p, "--output-format", "stream-json", "--verbose",
                               "--allowedTools", "Read", "--max-turns", "4"], "claude"),
    "codex": (lambda p: None, "codex"),
    "pi": (lambda p: ["--no-session", "--mode", "json", "-p", p], "pi"),
    "continue": (lambda p: ["-p", p, "--auto"], "cn"),
    "opencode": (lambda p: None, "opencode"),
    # Continue with `provider: ollama` (Ollama's other clients are in test_ollama_clients.py).
    "ollama": (lambda p: ["-p", p, "--auto"], "cn"),
}


def headless(name, setup, home, prompt):
    binary = client_path(HEADLESS[name][1])
    if name == "codex":
        return [binary, "exec", "--skip-git-repo-check", "--json", "--model", MODEL, prompt]
    if name == "opencode":
        return [binary, "run", prompt]
    cmd = command(setup, home)
    return [binary, *cmd[1:], *HEADLESS[name][0](prompt)]


@pytest.mark.parametrize("name", list(HEADLESS))
def test_the_client_knows_the_served_model(scripted, name, tmp_path):
    model, server = scripted
    start = len(model.requests)
    word = f"wörd-{secrets.token_hex(4)}"
    ws = workspace(tmp_path, {"secret.txt": f"The secret word is: {word}\n"})
    setup = printed(server.root, name, key=API_KEY)
    home = tmp_path / "home"
    env = apply(setup, home)
    env["PWD"] = str(ws)
    p = run(headless(name, setup, home, PROMPT), ws, env, name)
    out = p.stdout + p.stderr
    for notice in NOTICES:
        assert notice not in out, f"{name}: {notice!r}\n{out[-3000:]}"
    assert word in p.stdout, f"{name} did not finish the task:\n{out[-4000:]}"
    variables = dict(setup["env"])
    if name == "claude-code":
        # Claude Code works with the printed window, and asks for replies of the printed size (32,000 otherwise).
        result = [e for e in json_lines(p.stdout) if e.get("type") == "result"][-1]
        usage = next(iter(result["modelUsage"].values()))
        assert usage["contextWindow"] == int(variables["CLAUDE_CODE_MAX_CONTEXT_TOKENS"]) == BIG_WINDOW, usage
        asked = {r.get("max_tokens") for r in model.requests[start:]}
        assert asked == {int(variables["CLAUDE_CODE_MAX_OUTPUT_TOKENS"])}, asked


# ---------------------------------------------------------------------------------------------------------------
# A long session against a small window.

WINDOW = 8192
ROUNDS = 8


@pytest.fixture(scope="module")
def small_window(tmp_path_factory):
    # A model that counts tokens from the request and refuses a prompt over its window (as vLLM does), behind an
    # agentd serving that window.
    model = ScriptedModel(window=WINDOW, estimate_usage=True)
    config = remote_config(tmp_path_factory.mktemp("agentd-small") / "remote.toml", model)
    server = Server("--config", str(config), "--max-model-len", str(WINDOW))
    yield model, server
    server.stop()
    model.stop()


def long_session(server, tmp_path, settings: bool):
    """ROUNDS prompts in one Pi session, each reading a file of ~1,000 tokens; the JSON events of every run."""
    words = [f"w{i}-{secrets.token_hex(3)}" for i in range(ROUNDS)]
    filler = " ".join(["the quick brown fox jumps over the lazy dog"] * 70)
    ws = workspace(tmp_path, {f"f{i}.txt": f"{filler}\nThe secret word is: {w}\n" for i, w in enumerate(words)})
    home = tmp_path / "home"
    if settings:
        setup = printed(server.root, "pi", key=API_KEY)
        env = apply(setup, home)
        assert json.loads(setup["files"][0]["content"])["providers"]["agentd"]["models"][0]["contextWindow"] \
            == WINDOW
    else:
        # The provider alone, as a user would write it without knowing the window.
        agent = home / ".pi" / "agent"
        agent.mkdir(parents=True)
        (agent / "models.json").write_text(json.dumps({"providers": {"agentd": {
            "baseUrl": server.base_url, "api": "openai-completions", "apiKey": API_KEY,
            "compat": {"supportsDeveloperRole": False, "supportsReasoningEffort": False},
            "models": [{"id": MODEL}]}}}))
        env = {"HOME": str(home), "PI_CODING_AGENT_DIR": str(agent)}
    session = tmp_path / "session.jsonl"
    runs = []
    for i in range(ROUNDS):
        p = run([client_path("pi"), "--provider", "agentd", "--model", MODEL, "--session", str(session),
                 "--mode", "json", "-p", f"Read the file f{i}.txt and tell me the secret word."],
                ws, env, f"pi-{'set' if settings else 'default'}-{i}")
        runs.append((json_lines(p.stdout), p.stdout + p.stderr, words[i]))
    return runs


def compactions(events):
    return [e.get("reason") for e in events if e.get("type") == "compaction_start"]


def errors(events):
    ends = [e for e in events if e.get("type") == "agent_end"]
    return [m.get("errorMessage") or "error" for e in ends for m in e.get("messages", [])
            if m.get("role") == "assistant" and m.get("stopReason") == "error"]


def test_a_long_pi_session_compacts_before_the_window(small_window, tmp_path):
    _, server = small_window
    runs = long_session(server, tmp_path, settings=True)
    reasons = [r for events, _, _ in runs for r in compactions(events)]
    assert "threshold" in reasons, [text[-2000:] for _, text, _ in runs]
    assert "overflow" not in reasons, reasons
    for events, text, word in runs:
        assert not errors(events), text[-3000:]
        assert word in text, text[-3000:]


def test_without_the_settings_the_same_session_hits_the_window(small_window, tmp_path):
    _, server = small_window
    runs = long_session(server, tmp_path, settings=False)
    overflowed = [text for events, text, _ in runs
                  if "overflow" in compactions(events) or errors(events)
                  or re.search(r"context (window|length)", text)]
    assert overflowed, "the control session never reached the window: the test would prove nothing"
