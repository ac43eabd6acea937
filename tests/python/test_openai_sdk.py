"""`agentd serve` through the official `openai` SDK: chat (plain, streamed, usage), every tool_choice, streamed
tool-call deltas, response_format, a tool-result round trip, logprobs, completions, vLLM's tokenize endpoints,
metrics, disconnects, and the error cases (400, 401, 404, 413, 503) in OpenAI's error shape.

Run: `pytest tests/python` (see conftest.py for how the server is found or started).
"""

import json
import threading
import time

import openai
import pytest
from pydantic import BaseModel

from conftest import Http

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "read_file",
            "description": "Read a file from the workspace",
            "parameters": {
                "type": "object",
                "properties": {"path": {"type": "string", "maxLength": 40}},
                "required": ["path"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "list_dir",
            "description": "List a directory",
            "parameters": {
                "type": "object",
                "properties": {"dir": {"type": "string", "maxLength": 40}},
                "required": ["dir"],
                "additionalProperties": False,
            },
        },
    },
]


def ask(text, system="You are a helpful assistant."):
    return [{"role": "system", "content": system}, {"role": "user", "content": text}]


def prompt_count(http, model, messages, tools=None, tool_choice=None):
    body = {"model": model, "messages": messages}
    if tools:
        body["tools"] = tools
    if tool_choice is not None:
        body["tool_choice"] = tool_choice
    r = http.post("/tokenize", json=body)
    assert r.status_code == 200, r.text
    return r.json()["count"]


# ---------------------------------------------------------------- chat


def test_models_list_and_get(client, model):
    models = client.models.list().data
    assert [m.id for m in models] == [model]
    # agentd says where the local engine runs (an extra field the SDK keeps).
    assert models[0].to_dict().get("device", "").startswith("cpu"), models[0].to_dict()
    assert client.models.retrieve(model).id == model
    with pytest.raises(openai.NotFoundError):
        client.models.retrieve("no-such-model")


def test_chat_usage_is_exact(client, http, model):
    messages = ask("Tell me a long story about a dragon.")
    r = client.chat.completions.create(model=model, messages=messages, max_tokens=12, temperature=0)
    assert r.object == "chat.completion"
    assert r.id.startswith("chatcmpl-")
    assert r.model == model
    choice = r.choices[0]
    assert choice.message.role == "assistant"
    assert isinstance(choice.message.content, str) and choice.message.content
    assert choice.finish_reason == "length"
    assert r.usage.completion_tokens == 12
    assert r.usage.prompt_tokens == prompt_count(http, model, messages)
    assert r.usage.total_tokens == r.usage.prompt_tokens + 12


def test_max_completion_tokens_and_stop(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Count from 1 to 20, one number per line."), max_completion_tokens=40,
        temperature=0, stop=["\n"],
    )
    assert "\n" not in r.choices[0].message.content
    assert r.choices[0].finish_reason in ("stop", "length")
    assert r.usage.completion_tokens <= 40


def test_sampling_parameters_and_extensions_are_accepted(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Say hello."), max_tokens=6, temperature=0.8, top_p=0.9, seed=3,
        presence_penalty=0.5, frequency_penalty=0.5, extra_body={"top_k": 20, "min_p": 0.05},
    )
    assert r.usage.completion_tokens <= 6


def test_streaming_with_usage(client, model):
    stream = client.chat.completions.create(
        model=model, messages=ask("Write a poem about the sea."), max_tokens=16, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert chunks[0].choices[0].delta.role == "assistant"
    ids = {c.id for c in chunks}
    assert len(ids) == 1
    text = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    assert text
    finals = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finals == ["length"]
    last = chunks[-1]
    assert last.choices == []
    assert last.usage.completion_tokens == 16
    assert last.usage.total_tokens == last.usage.prompt_tokens + 16
    assert all(c.usage is None for c in chunks[:-1])


def test_streaming_without_usage_has_no_usage_chunk(client, model):
    chunks = list(client.chat.completions.create(model=model, messages=ask("Hi"), max_tokens=4, stream=True))
    assert all(c.choices for c in chunks)
    assert all(c.usage is None for c in chunks)


# ---------------------------------------------------------------- tools


def test_tool_choice_none_answers_in_text(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Read the file a.txt"), tools=TOOLS, tool_choice="none", max_tokens=12,
        temperature=0,
    )
    assert not r.choices[0].message.tool_calls
    assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_choice_auto_is_valid_either_way(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Read the file a.txt"), tools=TOOLS, tool_choice="auto", max_tokens=60,
        temperature=0,
    )
    m = r.choices[0].message
    if m.tool_calls:
        assert r.choices[0].finish_reason == "tool_calls"
        for call in m.tool_calls:
            assert call.function.name in ("read_file", "list_dir")
            json.loads(call.function.arguments)
    else:
        assert r.choices[0].finish_reason in ("stop", "length")


def test_tool_choice_required_calls_a_tool(client, http, model):
    messages = ask("List the directory src")
    r = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=60, temperature=0,
    )
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert len(choice.message.tool_calls) == 1
    call = choice.message.tool_calls[0]
    assert call.type == "function" and call.id
    assert call.function.name in ("read_file", "list_dir")
    args = json.loads(call.function.arguments)
    assert isinstance(args, dict) and len(args) == 1
    assert r.usage.prompt_tokens == prompt_count(http, model, messages, TOOLS, "required")


def test_named_tool_choice(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Show me the file src/main.rs"), tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "read_file"}}, max_tokens=60, temperature=0,
    )
    calls = r.choices[0].message.tool_calls
    assert [c.function.name for c in calls] == ["read_file"]
    assert "path" in json.loads(calls[0].function.arguments)
    assert r.choices[0].message.content is None


def test_streamed_tool_call_deltas(client, model):
    stream = client.chat.completions.create(
        model=model, messages=ask("Show me the file src/main.rs"), tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "read_file"}}, max_tokens=60, temperature=0,
        stream=True,
    )
    deltas = []
    finish = None
    for chunk in stream:
        for choice in chunk.choices:
            if choice.delta.tool_calls:
                deltas.extend(choice.delta.tool_calls)
            if choice.finish_reason:
                finish = choice.finish_reason
    assert finish == "tool_calls"
    assert len(deltas) >= 2, "arguments arrive in several fragments"
    first, rest = deltas[0], deltas[1:]
    assert first.index == 0 and first.id and first.type == "function"
    assert first.function.name == "read_file"
    for d in rest:
        assert d.index == 0
        assert d.id is None and d.function.name is None
    arguments = "".join(d.function.arguments or "" for d in deltas)
    assert "path" in json.loads(arguments)


def test_sdk_stream_helper_assembles_tool_calls(client, model):
    with client.chat.completions.stream(
        model=model, messages=ask("List the directory docs"), tools=TOOLS,
        tool_choice={"type": "function", "function": {"name": "list_dir"}}, max_tokens=60, temperature=0,
    ) as stream:
        for _ in stream:
            pass
        final = stream.get_final_completion()
    call = final.choices[0].message.tool_calls[0]
    assert call.function.name == "list_dir"
    assert "dir" in json.loads(call.function.arguments)


def test_tool_result_round_trip(client, http, model):
    messages = ask("List the directory src")
    first = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="required", parallel_tool_calls=False,
        max_tokens=60, temperature=0,
    )
    assistant = first.choices[0].message
    call = assistant.tool_calls[0]
    messages = messages + [
        assistant.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": "main.rs\nlib.rs"},
    ]
    assert messages[2]["role"] == "assistant" and "content" not in messages[2]
    second = client.chat.completions.create(
        model=model, messages=messages, tools=TOOLS, tool_choice="none", max_tokens=16, temperature=0,
    )
    assert not second.choices[0].message.tool_calls
    assert second.choices[0].message.content
    assert second.usage.prompt_tokens == prompt_count(http, model, messages, TOOLS, "none")
    # The transcript grew by the call and its result.
    assert second.usage.prompt_tokens > prompt_count(http, model, ask("List the directory src"), TOOLS, "none")


# ---------------------------------------------------------------- response_format


def test_response_format_json_object(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Describe a cat as JSON."), response_format={"type": "json_object"},
        max_tokens=80, temperature=0,
    )
    if r.choices[0].finish_reason == "stop":
        assert isinstance(json.loads(r.choices[0].message.content), dict)
    else:
        assert r.choices[0].message.content.lstrip().startswith("{")


def test_response_format_json_schema(client, model):
    schema = {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 20}},
        "required": ["city"],
        "additionalProperties": False,
    }
    r = client.chat.completions.create(
        model=model, messages=ask("What is the capital of France? Answer in JSON."),
        response_format={"type": "json_schema", "json_schema": {"name": "answer", "schema": schema, "strict": True}},
        max_tokens=48, temperature=0,
    )
    assert r.choices[0].finish_reason == "stop"
    assert isinstance(json.loads(r.choices[0].message.content)["city"], str)


class City(BaseModel):
    name: str
    country: str


def test_sdk_parse_with_a_pydantic_model(client, model):
    r = client.chat.completions.parse(
        model=model, messages=ask("Name a city and its country."), response_format=City, max_tokens=60,
        temperature=0,
    )
    parsed = r.choices[0].message.parsed
    assert isinstance(parsed, City)


# ---------------------------------------------------------------- logprobs, completions, tokenize


def test_chat_logprobs(client, model):
    r = client.chat.completions.create(
        model=model, messages=ask("Say hello."), max_tokens=5, temperature=0, logprobs=True, top_logprobs=3,
    )
    content = r.choices[0].logprobs.content
    assert len(content) == r.usage.completion_tokens == 5
    for entry in content:
        assert entry.logprob <= 0
        assert len(entry.top_logprobs) == 3
        # Greedy: the chosen token is the most likely one.
        assert entry.top_logprobs[0].logprob == pytest.approx(entry.logprob, abs=1e-4)
    stream = client.chat.completions.create(
        model=model, messages=ask("Say hello."), max_tokens=5, temperature=0, logprobs=True, top_logprobs=1,
        stream=True,
    )
    streamed = [e for c in stream for ch in c.choices if ch.logprobs for e in (ch.logprobs.content or [])]
    assert len(streamed) == 5


def test_completions(client, model):
    r = client.completions.create(model=model, prompt="Once upon a time", max_tokens=6, temperature=0, logprobs=2)
    assert r.object == "text_completion"
    assert r.choices[0].text
    assert r.usage.completion_tokens == 6
    assert len(r.choices[0].logprobs.tokens) == 6
    assert all(len(t) <= 2 for t in r.choices[0].logprobs.top_logprobs)
    chunks = list(client.completions.create(
        model=model, prompt="Once upon a time", max_tokens=6, temperature=0, stream=True,
        stream_options={"include_usage": True},
    ))
    assert "".join(c.choices[0].text for c in chunks if c.choices)
    assert chunks[-1].usage.completion_tokens == 6


def test_tokenize_and_detokenize(http, model):
    r = http.post("/tokenize", json={"model": model, "prompt": "Hello world", "return_token_strs": True})
    body = r.json()
    assert body["count"] == len(body["tokens"]) == len(body["token_strs"])
    assert body["max_model_len"] == 8192
    back = http.post("/detokenize", json={"model": model, "tokens": body["tokens"]}).json()
    assert back["prompt"].endswith("Hello world")


# ---------------------------------------------------------------- lifecycle, metrics


def test_disconnect_frees_the_engine(client, server, http, model):
    stream = client.chat.completions.create(
        model=model, messages=ask("Write a very long story."), max_tokens=2000, stream=True,
    )
    for i, _ in enumerate(stream):
        if i == 3:
            break
    stream.close()
    # The engine is free again: a short request answers long before 2000 tokens could have been generated.
    started = time.time()
    r = client.chat.completions.create(model=model, messages=ask("Hi"), max_tokens=3)
    assert r.usage.completion_tokens <= 3
    deadline = time.time() + 30
    while time.time() < deadline:
        text = Http(server.root, None).get("/metrics").text
        if 'vllm:num_requests_running{model_name="%s"} 0' % model in text:
            break
        time.sleep(0.2)
    else:
        pytest.fail("a request still counts as running after its client left")
    assert time.time() - started < 120


def test_metrics_use_vllm_names(server, client, model):
    client.chat.completions.create(model=model, messages=ask("Hi"), max_tokens=2)
    text = Http(server.root, None).get("/metrics").text
    for name in [
        "vllm:time_to_first_token_seconds_bucket", "vllm:inter_token_latency_seconds_bucket",
        "vllm:e2e_request_latency_seconds_count", "vllm:request_queue_time_seconds_sum",
        "vllm:prompt_tokens_total", "vllm:generation_tokens_total", "vllm:num_requests_running",
        "vllm:num_requests_waiting",
    ]:
        assert name in text, name
    gen = [l for l in text.splitlines() if l.startswith("vllm:generation_tokens_total")][0]
    assert float(gen.split()[-1]) >= 2
    assert Http(server.root, None).get("/health").status_code == 200


# ---------------------------------------------------------------- errors


def assert_openai_error(response, status, param=None):
    assert response.status_code == status, response.text
    err = response.json()["error"]
    assert set(err) == {"message", "type", "param", "code"}
    assert err["message"]
    if param is not None:
        assert err["param"] == param
    return err


def test_auth_errors(server, model):
    bad = openai.OpenAI(base_url=server.base_url, api_key="wrong", max_retries=0)
    with pytest.raises(openai.AuthenticationError):
        bad.chat.completions.create(model=model, messages=ask("hi"), max_tokens=2)
    r = Http(server.root, None).post("/v1/chat/completions", json={"model": model, "messages": ask("hi")})
    assert_openai_error(r, 401)
    assert Http(server.root, None).get("/health").status_code == 200, "health needs no key"


def test_unknown_model_and_route(client, http):
    with pytest.raises(openai.NotFoundError) as e:
        client.chat.completions.create(model="gpt-4o", messages=ask("hi"), max_tokens=2)
    assert e.value.code == "model_not_found"
    assert_openai_error(http.get("/v1/nothing-here"), 404)


@pytest.mark.parametrize(
    "change,param",
    [
        ({"n": 2}, "n"),
        ({"temperature": -1}, "temperature"),
        ({"temperature": "hot"}, "temperature"),
        ({"top_p": 3}, "top_p"),
        ({"max_tokens": -5}, "max_tokens"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "hi"}]}, None),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tools": TOOLS, "tool_choice": {"type": "function", "function": {"name": "rm"}}}, "tool_choice"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "nonsense"}}}},
         "response_format"),
        ({"tools": [{"type": "function", "function": {"name": "bad name!", "parameters": {}}}]}, "tools[0]"),
    ],
)
def test_invalid_requests_are_400(http, model, change, param):
    body = {"model": model, "messages": ask("hi"), "max_tokens": 2, **change}
    assert_openai_error(http.post("/v1/chat/completions", json=body), 400, param)


def test_sdk_raises_bad_request(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ask("hi"), n=2)
    assert e.value.param == "n"


def test_malformed_json_and_huge_numbers(http, model):
    r = http.post("/v1/chat/completions", content=b'{"model": "x", "messages": [', headers={"Content-Type": "application/json"})
    assert_openai_error(r, 400)
    assert_openai_error(http.post("/v1/chat/completions", content=b"not json"), 400)
    r = http.post("/v1/chat/completions", json={"model": model, "messages": ask("hi"), "max_tokens": 10**30})
    assert_openai_error(r, 400, "max_tokens")
    # A max_tokens beyond the context window is clamped to it, not an error.
    r = http.post("/v1/chat/completions", json={"model": model, "messages": ask("hi"), "max_tokens": 4_000_000_000,
                                                 "stop": ["."]})
    assert r.status_code == 200, r.text


def test_prompt_longer_than_the_context_window(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.chat.completions.create(model=model, messages=ask("dragon " * 9000), max_tokens=2)
    assert "8192" in str(e.value)
    # Streaming requests fail the same way, before the stream starts.
    with pytest.raises(openai.BadRequestError):
        list(client.chat.completions.create(model=model, messages=ask("dragon " * 9000), max_tokens=2, stream=True))


def test_oversized_body_is_413(tight_server):
    r = Http(tight_server.root, "sk-agentd-test").post("/v1/chat/completions", json={"messages": ask("x" * 200_000)})
    assert_openai_error(r, 413)


def test_saturated_server_is_503_with_retry_after(tight_server):
    c = openai.OpenAI(base_url=tight_server.base_url, api_key="sk-agentd-test", max_retries=0)
    model = c.models.list().data[0].id
    started = threading.Event()
    release = threading.Event()

    def hold():
        stream = c.chat.completions.create(
            model=model, messages=ask("Write a very long story."), max_tokens=3000, stream=True,
        )
        for _ in stream:
            started.set()
            if release.is_set():
                break
        stream.close()

    t = threading.Thread(target=hold)
    t.start()
    try:
        assert started.wait(120)
        r = Http(tight_server.root, "sk-agentd-test").post(
            "/v1/chat/completions", json={"model": model, "messages": ask("hi"), "max_tokens": 2}
        )
        assert_openai_error(r, 503)
        assert int(r.headers["retry-after"]) >= 1
        with pytest.raises(openai.InternalServerError) as e:
            c.chat.completions.create(model=model, messages=ask("hi"), max_tokens=2)
        assert e.value.status_code == 503
    finally:
        release.set()
        t.join(120)
    # Once the slot is free the server answers again.
    deadline = time.time() + 60
    while True:
        try:
            c.chat.completions.create(model=model, messages=ask("hi"), max_tokens=2)
            break
        except openai.InternalServerError:
            assert time.time() < deadline
            time.sleep(0.2)
