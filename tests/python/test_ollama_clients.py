"""Ollama's API (`/api/*`) through the real clients that speak it, against one `agentd serve` of two models
(Qwen2.5-Coder-0.5B and SmolLM2-135M, temperature 0) with Gemma 3 270M offered on demand (--models-available):

- the official `ollama` Python library (pip `ollama`): list, show, chat, streamed chat, a tool round trip, a
  `format` schema, generate (templated, raw, and with `suffix`: fill-in-the-middle, with the `openai` SDK's
  `suffix` beside it), load and unload by `keep_alive`, errors as `ResponseError`;
- the official `ollama` JavaScript library and the Vercel AI SDK's Ollama provider (npm `ollama`,
  `ollama-ai-provider-v2`, driven by js/ollama_clients.mjs): a chat, a streamed chat, a tool round trip and a
  `format` request with each.

Continue's CLI with an Ollama model is in test_client_settings.py (the `ollama` entry of `agentd clients`).
A missing library skips its test unless AGENTD_REQUIRE_CLIENTS=1 (CI), which makes it a failure.
"""

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import API_KEY, Server
from test_clients import HOME, run

QWEN = "qwen2.5-coder-0.5b-instruct"
SMOL = "smollm2-135m-instruct"
GEMMA = "gemma-3-270m"  # a base model: raw prompts only
NODE_MODULES = HOME / "npm" / "node_modules"


def need(what):
    if os.environ.get("AGENTD_REQUIRE_CLIENTS") == "1":
        pytest.fail(f"{what} is not installed: run scripts/install-clients.sh")
    pytest.skip(f"{what} is not installed (scripts/install-clients.sh)")


@pytest.fixture(scope="module")
def served():
    s = Server("--model", QWEN, "--model", "smollm2", "--models-available",
               "--override-generation-config", '{"temperature": 0}')
    yield s
    s.stop()


@pytest.fixture(scope="module")
def ollama_client(served):
    try:
        import ollama
    except ImportError:
        need("the ollama Python library")
    return ollama.Client(host=served.root, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=600)


WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}


def test_models_are_listed_and_shown(ollama_client):
    names = [m.model for m in ollama_client.list().models]
    assert f"{QWEN}:latest" in names and f"{SMOL}:latest" in names, names
    shown = ollama_client.show(f"{QWEN}:latest")
    assert shown.modelinfo["qwen2.context_length"] == 32768, shown.modelinfo
    assert "tools" in shown.capabilities and "completion" in shown.capabilities
    assert "insert" in shown.capabilities, shown.capabilities  # its vocabulary has FIM tokens
    assert "insert" not in ollama_client.show(SMOL).capabilities
    assert "<|im_start|>" in shown.template, shown.template[:200]
    assert shown.details.family == "qwen2" and shown.details.quantization_level == "Q4_K_M", shown.details
    loaded = {m.model: m for m in ollama_client.ps().models}
    assert f"{QWEN}:latest" in loaded and loaded[f"{QWEN}:latest"].context_length == 32768, loaded


def test_chat_whole_and_streamed_with_durations(ollama_client):
    r = ollama_client.chat(model=QWEN, messages=[{"role": "user", "content": "Say hello."}],
                           options={"num_predict": 16})
    assert r.done and r.done_reason in ("stop", "length") and r.message.content.strip(), r
    assert r.eval_count > 0 and r.prompt_eval_count > 0, r
    assert 0 < r.prompt_eval_duration + r.eval_duration <= r.total_duration, r
    parts = list(ollama_client.chat(model=f"{SMOL}:latest", messages=[{"role": "user", "content": "Count to five."}],
                                    stream=True, options={"num_predict": 12}))
    assert len(parts) > 2 and parts[-1].done and not any(p.done for p in parts[:-1]), parts
    assert parts[-1].done_reason == "length" and parts[-1].eval_count == 12, parts[-1]
    assert "".join(p.message.content for p in parts).strip()


def test_a_tool_round_trip(ollama_client):
    ask = [{"role": "user", "content": "What is the weather in Paris? Use the get_weather tool."}]
    first = ollama_client.chat(model=QWEN, messages=ask, tools=[WEATHER], options={"num_predict": 64})
    calls = first.message.tool_calls or []
    assert [c.function.name for c in calls] == ["get_weather"], first.message
    assert isinstance(calls[0].function.arguments, dict) and calls[0].function.arguments.get("city"), calls
    result = {"role": "tool", "tool_name": "get_weather", "content": "It is sunny and 21 C in Paris."}
    second = ollama_client.chat(model=QWEN, messages=[*ask, first.message, result], tools=[WEATHER],
                                options={"num_predict": 48})
    assert second.done and (second.message.content or second.message.tool_calls), second
    print("after the result:", second.message)


def test_a_format_schema_is_held_to(ollama_client):
    from pydantic import BaseModel

    class Country(BaseModel):
        name: str
        capital: str
        languages: list[str]

    for model in (QWEN, SMOL):
        r = ollama_client.chat(model=model, messages=[{"role": "user", "content": "Tell me about France."}],
                               format=Country.model_json_schema(), options={"num_predict": 96})
        assert set(json.loads(r.message.content)) == {"name", "capital", "languages"}, r.message.content
        Country.model_validate_json(r.message.content)
    r = ollama_client.generate(model=SMOL, prompt="Give me a JSON object about a cat.", format="json",
                               options={"num_predict": 64})
    assert isinstance(json.loads(r.response), dict), r.response


def test_generate_templated_and_raw(ollama_client):
    r = ollama_client.generate(model=QWEN, prompt="What is 2+2? Answer with the number.", system="Be brief.",
                               options={"num_predict": 8})
    assert "4" in r.response and r.done, r
    raw = ollama_client.generate(model=SMOL, prompt="The capital of France is", raw=True,
                                 options={"num_predict": 4})
    assert raw.response.strip() and raw.eval_count == 4 and raw.done_reason == "length", raw


def test_generate_fills_in_the_middle_with_suffix(ollama_client):
    r = ollama_client.generate(model=QWEN, prompt="def fibonacci(n):\n    if n < 2:\n        return n\n    ",
                               suffix="\n\nprint(fibonacci(10))\n", options={"num_predict": 64})
    middle = "".join(r.response.split())
    assert "returnfibonacci(n-1)+fibonacci(n-2)" in middle, r.response
    assert "print(" not in r.response and r.done_reason == "stop", r
    # The openai SDK's `suffix` on /v1/completions takes the same path.
    import openai
    client = openai.OpenAI(base_url=f"{ollama_client._client.base_url}/v1", api_key=API_KEY)
    c = client.completions.create(model=QWEN, prompt="def add(a, b):\n    ", suffix="\n\nprint(add(1, 2))\n",
                                  max_tokens=32, temperature=0)
    assert "a + b" in c.choices[0].text and "print(" not in c.choices[0].text, c


def test_load_and_unload_by_keep_alive(ollama_client):
    def loaded():
        return {m.model for m in ollama_client.ps().models}

    assert f"{GEMMA}:latest" not in loaded()
    r = ollama_client.generate(model=GEMMA, prompt="", keep_alive="5m")
    assert r.done and r.done_reason == "load", r
    assert f"{GEMMA}:latest" in loaded()
    r = ollama_client.generate(model=GEMMA, prompt="The capital of France is", raw=True,
                               options={"num_predict": 4}, keep_alive=0)
    assert r.done and r.eval_count == 4, r
    assert f"{GEMMA}:latest" not in loaded(), "keep_alive 0 unloads after the request"
    assert f"{QWEN}:latest" in loaded() and f"{SMOL}:latest" in loaded()


def test_errors_come_in_ollamas_shape(ollama_client):
    import ollama
    with pytest.raises(ollama.ResponseError) as e:
        ollama_client.chat(model="no-such-model", messages=[{"role": "user", "content": "x"}])
    assert e.value.status_code == 404 and "no-such-model" in e.value.error, e.value
    with pytest.raises(ollama.ResponseError) as e:
        ollama_client.chat(model=QWEN, messages=[{"role": "user", "content": "x"}], options={"top_p": 7})
    assert e.value.status_code == 400 and "top_p" in e.value.error, e.value
    with pytest.raises(ollama.ResponseError) as e:
        ollama_client.chat(model=QWEN, messages=[{"role": "user", "content": "x"}],
                           format={"type": "object", "properties": {"a": {"type": "strin"}}})
    assert e.value.status_code == 400, e.value


def test_the_javascript_library_and_the_ai_sdk(served, tmp_path):
    for package in ("ollama", "ollama-ai-provider-v2", "ai", "zod"):
        if not (NODE_MODULES / package / "package.json").exists():
            need(f"npm {package}")
    script = tmp_path / "ollama_clients.mjs"
    script.write_text((Path(__file__).parent / "js" / "ollama_clients.mjs").read_text())
    (tmp_path / "node_modules").symlink_to(NODE_MODULES)
    p = run(["node", str(script)], tmp_path, {"HOST": served.root, "KEY": API_KEY, "MODEL": QWEN}, "ollama-js")
    assert p.returncode == 0, p.stderr[-3000:]
    checks = {c["check"]: c for c in map(json.loads, p.stdout.splitlines())}
    assert f"{QWEN}:latest" in checks["js.list"]["names"], checks["js.list"]
    for name in ("js.chat", "ai.chat"):
        assert checks[name]["content"].strip(), checks[name]
    assert checks["js.chat"]["eval_count"] > 0 and checks["js.chat"]["eval_duration"] > 0
    assert checks["js.stream"]["parts"] > 2 and checks["js.stream"]["done"], checks["js.stream"]
    assert checks["ai.stream"]["deltas"] > 2 and checks["ai.stream"]["output_tokens"] <= 16, checks["ai.stream"]
    assert checks["js.tools"]["calls"] and checks["js.tools"]["calls"][0][0] == "get_weather", checks["js.tools"]
    assert checks["js.tools"]["answer"] is not None, "the tool result was answered"
    assert checks["ai.tools"]["calls"][0] == ["get_weather", {"city": "Rome"}], checks["ai.tools"]
    assert checks["ai.tools"]["steps"] == 2 and "It is sunny in Rome." in checks["ai.tools"]["results"]
    assert set(json.loads(checks["js.format"]["content"])) == {"name", "capital"}, checks["js.format"]
    assert set(checks["ai.format"]["object"]) == {"name", "capital"}, checks["ai.format"]
