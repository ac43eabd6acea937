"""The coding clients finish a task through agentd when the model can: Claude Code (Anthropic Messages API), Codex
CLI (Responses API) and Pi (Chat Completions), unchanged, each in a temp workspace of its own, against a real
`agentd serve` whose remote provider points at a scripted model (`scripted_model.py`: it calls the request's own
file-reading or shell tool for the file the user names, then answers with what the tool's result says).

test_clients.py runs the same clients on the real Qwen2.5-Coder-0.5B, where the client's tool round trip is
checked but the final answer is the 0.5B model's to give (it keeps calling instead). Here everything between
the client and the model is agentd's — the client's request in its own API, the tool call back in that API's
shape, the client running its own tool, the result in the next request, the final answer streamed back — and
the check is the outcome: the client's final answer holds the words that only the files had (one file; two
files, read by two calls in one turn where the client allows parallel calls).
"""

import json
import secrets
import urllib.request
from pathlib import Path

import pytest

from conftest import API_KEY, Server
from scripted_model import MODEL, ScriptedModel
from test_clients import client_path, codex_home, json_lines, pi_agent_dir, run



@pytest.fixture(scope="module")
def scripted(tmp_path_factory):
    model = ScriptedModel()
    config = tmp_path_factory.mktemp("agentd") / "remote.toml"
    # The embedded SmolLM2 tokenizer counts the prompts (the scripted model has no /tokenize).
    config.write_text(f"""
provider = "remote"

[remote]
base_url = "{model.base_url}"
model = "{MODEL}"
tokenizer = "smollm2-135m-instruct"

[remote.compat]
tokenize_endpoint = false
""")
    server = Server("--config", str(config))
    yield model, server
    server.stop()
    model.stop()


PROMPTS = {
    1: "Read the file secret.txt and tell me the secret word.",
    2: "Read the files secret.txt and other.txt and tell me both secret words.",
}


@pytest.fixture(params=[1, 2], ids=["one-file", "two-files"])
def task(request, tmp_path):
    """A workspace whose files hold words made for this test, and the prompt that asks for them (two files:
    two calls in one turn where the client allows parallel calls)."""
    ws = tmp_path / "ws"
    ws.mkdir()
    words = []
    for name in ["secret.txt", "other.txt"][: request.param]:
        # Non-ASCII on purpose: the word crosses every API (and its SSE chunks) as UTF-8 both ways.
        words.append(f"wörd-{secrets.token_hex(4)}-日本")
        (ws / name).write_text(f"The secret word is: {words[-1]}\n")
    return ws, words, PROMPTS[request.param]


def results_after(model, start):
    """The tool results the scripted model was sent since request `start`."""
    return [m for r in model.requests[start:] for m in r.get("messages", []) if m.get("role") == "tool"]


def has_all(text, words):
    return all(w in (text or "") for w in words)


def claude(server, ws, prompt, tmp_path, allowed):
    env = {
        "ANTHROPIC_BASE_URL": server.root,
        "ANTHROPIC_API_KEY": API_KEY,
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "CLAUDE_CONFIG_DIR": str(tmp_path / "claude-config"),
    }
    # A Claude model name: it reaches the one served model (no alias needed).
    p = run([client_path("claude"), "-p", prompt, "--model", "claude-sonnet-4-5", "--output-format",
             "stream-json", "--verbose", "--allowedTools", allowed, "--max-turns", "4"], ws, env, "claude")
    events = json_lines(p.stdout)
    uses = [b for e in events if e.get("type") == "assistant"
            for b in e["message"].get("content", []) if b.get("type") == "tool_use"]
    final = [e for e in events if e.get("type") == "result"]
    assert final and final[-1].get("subtype") == "success", p.stdout[-3000:] + p.stderr[-2000:]
    return uses, final[-1]["result"]


def codex(server, ws, prompt, tmp_path, sandbox):
    home = codex_home(tmp_path, server.base_url, MODEL, sandbox)
    env = {"CODEX_HOME": str(home), "AGENTD_API_KEY": API_KEY}
    p = run([client_path("codex"), "exec", "--skip-git-repo-check", "--json", prompt], ws, env, "codex")
    events = json_lines(p.stdout)
    assert any(e.get("type") == "turn.completed" for e in events), p.stdout[-4000:] + p.stderr[-2000:]
    items = [e["item"] for e in events if e.get("type") == "item.completed" and isinstance(e.get("item"), dict)]
    commands = [i for i in items if i.get("type") == "command_execution"]
    answers = [i.get("text", "") for i in items if i.get("type") == "agent_message"]
    assert answers, items
    return commands, answers[-1]


def pi(server, ws, prompt, tmp_path):
    agent_dir = pi_agent_dir(tmp_path, server.base_url, MODEL, max_tokens=4096)
    p = run([client_path("pi"), "--no-session", "--provider", "agentd", "--model", MODEL, "--mode", "json",
             "-p", prompt], ws, {"PI_CODING_AGENT_DIR": str(agent_dir)}, "pi")
    events = json_lines(p.stdout)
    ran = [e for e in events if e.get("type") == "tool_execution_end"]
    ends = [e for e in events if e.get("type") == "agent_end"]
    assert ends, p.stdout[-3000:] + p.stderr[-2000:]
    last = [m for m in ends[-1].get("messages", []) if m.get("role") == "assistant"][-1]
    assert last.get("stopReason") == "stop", last
    text = "".join(c.get("text", "") for c in last.get("content", []) if c.get("type") == "text")
    return ran, text


def test_claude_code_finishes_the_task(scripted, task, tmp_path):
    model, server = scripted
    ws, words, prompt = task
    start = len(model.requests)
    uses, answer = claude(server, ws, prompt, tmp_path, "Read")
    assert [u["name"] for u in uses] == ["Read"] * len(words), uses
    # The paths are the workspace's (absolute where Claude Code's schema asks for them: the working directory its
    # prompt names, joined by the model).
    assert {(ws / u["input"]["file_path"]).resolve().parent for u in uses} == {ws.resolve()}, uses
    assert has_all(answer, words), answer
    # The results the model saw came from Claude Code's own Read (numbered lines), one per call.
    assert has_all(json.dumps(results_after(model, start), ensure_ascii=False), words)
    # Claude Code asks for 32,000 tokens on a ~30k-token prompt; the model's 32k window gets what is left.
    asked = [r.get("max_tokens") for r in model.requests[start:]]
    assert asked and all(n and n < 32768 - 16000 for n in asked), asked


def test_codex_finishes_the_task(scripted, task, tmp_path):
    _, server = scripted
    ws, words, prompt = task
    commands, answer = codex(server, ws, prompt, tmp_path, "read-only")
    outputs = "".join(c.get("aggregated_output") or "" for c in commands)
    assert len(commands) == len(words) and has_all(outputs, words), commands
    assert has_all(answer, words), answer


def test_pi_finishes_the_task(scripted, task, tmp_path):
    _, server = scripted
    ws, words, prompt = task
    ran, answer = pi(server, ws, prompt, tmp_path)
    results = json.dumps([e.get("result") for e in ran], ensure_ascii=False)
    assert len(ran) == len(words) and has_all(results, words), ran
    assert has_all(answer, words), answer


EDIT = "In the file config.json change the port from 8080 to 9090."


@pytest.fixture
def config_file(tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "config.json").write_text('{\n  "name": "demo",\n  "port": 8080\n}\n')
    return ws


def edited(ws):
    return json.loads((ws / "config.json").read_text())


def test_claude_code_edits_a_file(scripted, config_file, tmp_path):
    _, server = scripted
    uses, answer = claude(server, config_file, EDIT, tmp_path, "Read,Edit")
    assert [u["name"] for u in uses] == ["Read", "Edit"], uses
    assert edited(config_file) == {"name": "demo", "port": 9090}
    assert "9090" in answer, answer


def test_codex_edits_a_file(scripted, config_file, tmp_path):
    _, server = scripted
    commands, answer = codex(server, config_file, EDIT, tmp_path, "workspace-write")
    assert [c.get("exit_code") for c in commands] == [0, 0], commands
    assert edited(config_file) == {"name": "demo", "port": 9090}
    assert "9090" in answer, answer


def test_pi_edits_a_file(scripted, config_file, tmp_path):
    _, server = scripted
    ran, answer = pi(server, config_file, EDIT, tmp_path)
    assert [e.get("toolName") for e in ran] == ["read", "edit"], ran
    assert edited(config_file) == {"name": "demo", "port": 9090}
    assert "9090" in answer, answer


def test_the_remote_models_window_is_served(scripted):
    model, server = scripted
    req = urllib.request.Request(server.base_url + "/models", headers={"authorization": f"Bearer {API_KEY}"})
    listed = json.load(urllib.request.urlopen(req, timeout=30))["data"]
    assert [(m["id"], m.get("max_model_len")) for m in listed] == [(MODEL, 32768)], listed
