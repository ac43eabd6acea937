"""`agentd serve`'s Anthropic Messages API through the official `anthropic` SDK (what Claude Code speaks):
`messages.create` with exact usage, `messages.stream` (text and tool-use deltas), a forced tool call and its
`tool_result` round trip, structured outputs (`messages.parse`, `output_config.format`), `count_tokens`, a client's model name mapped to the served model, `x-api-key` auth, and
errors in Anthropic's shape.

Run: `pytest tests/python` (see conftest.py for how the server is found or started).
"""

import json
import os

import anthropic
import pydantic
import pytest

from conftest import API_KEY, Http

WEATHER = {
    "name": "get_weather",
    "description": "The weather in a city",
    "input_schema": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}

# What Claude Code would send: a name this server does not serve, mapped to the one it does.
CLAUDE = "claude-sonnet-4-5"


@pytest.fixture(scope="module")
def claude(server):
    return anthropic.Anthropic(base_url=server.root, api_key=os.environ.get("AGENTD_API_KEY", API_KEY),
                               max_retries=0, timeout=300)


def test_create_with_exact_usage(claude):
    kwargs = dict(model=CLAUDE, system="Answer in one word.",
                  messages=[{"role": "user", "content": "What colour is the sky?"}])
    m = claude.messages.create(max_tokens=16, extra_body={"temperature": 0}, **kwargs)
    assert m.type == "message" and m.role == "assistant"
    assert m.model == CLAUDE
    assert m.content[0].type == "text" and m.content[0].text.strip()
    assert m.stop_reason in ("end_turn", "max_tokens")
    counted = claude.messages.count_tokens(**kwargs).input_tokens
    assert m.usage.input_tokens + (m.usage.cache_read_input_tokens or 0) == counted
    assert m.usage.output_tokens >= 1


def test_stream_text(claude):
    with claude.messages.stream(model=CLAUDE, max_tokens=24, extra_body={"temperature": 0},
                                messages=[{"role": "user", "content": "Count from 1 to 5."}]) as s:
        text = "".join(s.text_stream)
        final = s.get_final_message()
    assert text.strip()
    assert final.content[0].text == text
    assert final.usage.output_tokens >= 1


def test_forced_tool_use_and_tool_result_round_trip(claude):
    m = claude.messages.create(model=CLAUDE, max_tokens=100, extra_body={"temperature": 0}, tools=[WEATHER],
                               tool_choice={"type": "tool", "name": "get_weather"},
                               messages=[{"role": "user", "content": "What is the weather in Paris?"}])
    uses = [b for b in m.content if b.type == "tool_use"]
    assert uses and m.stop_reason == "tool_use", m
    assert set(uses[0].input) == {"city"}
    follow = claude.messages.create(
        model=CLAUDE, max_tokens=60, extra_body={"temperature": 0}, tools=[WEATHER], tool_choice={"type": "none"},
        messages=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"role": "assistant", "content": [{"type": "tool_use", "id": uses[0].id, "name": "get_weather",
                                                "input": uses[0].input}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": uses[0].id,
                                          "content": "sunny, 24 C"}]},
        ],
    )
    assert follow.content[0].type == "text" and follow.content[0].text.strip()


def test_streamed_tool_use(claude):
    with claude.messages.stream(model=CLAUDE, max_tokens=100, extra_body={"temperature": 0}, tools=[WEATHER],
                                tool_choice={"type": "any", "disable_parallel_tool_use": True},
                                messages=[{"role": "user", "content": "Weather in Oslo?"}]) as s:
        final = s.get_final_message()
    uses = [b for b in final.content if b.type == "tool_use"]
    assert len(uses) == 1 and isinstance(uses[0].input, dict) and uses[0].input["city"]


def test_errors_in_anthropic_shape(server, claude):
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=CLAUDE, max_tokens=0, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["type"] == "error"
    assert e.value.body["error"]["type"] == "invalid_request_error"
    wrong = anthropic.Anthropic(base_url=server.root, api_key="wrong", max_retries=0)
    with pytest.raises(anthropic.AuthenticationError) as e:
        wrong.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}])
    assert e.value.body["error"]["type"] == "authentication_error"
    # Without the SDK: a missing max_tokens, a missing key, both in Anthropic's shape.
    raw = Http(server.root, None)
    r = raw.request("POST", "/v1/messages", {"model": CLAUDE, "messages": [{"role": "user", "content": "x"}]},
                    headers={"x-api-key": os.environ.get("AGENTD_API_KEY", API_KEY)})
    assert r.status_code == 400 and r.json()["error"]["message"] == "`max_tokens` is required"
    r = raw.request("POST", "/v1/messages", {"model": CLAUDE, "max_tokens": 5, "messages": []})
    assert r.status_code == 401 and r.json()["type"] == "error", r.text


def test_huge_max_tokens_and_a_prompt_over_the_window(claude):
    # Claude Code asks for max_tokens 32000 whatever the model: the answer simply ends at the window.
    m = claude.messages.create(model=CLAUDE, max_tokens=1_000_000, extra_body={"temperature": 0},
                               stop_sequences=["."],
                               messages=[{"role": "user", "content": "Say hello."}])
    assert m.stop_reason in ("end_turn", "stop_sequence", "max_tokens")
    # A prompt longer than any window this server serves: the error Claude Code compacts on, not a hang.
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=CLAUDE, max_tokens=5,
                               messages=[{"role": "user", "content": "word " * 300_000}])
    assert e.value.body["error"]["type"] == "invalid_request_error"
    assert e.value.body["error"]["message"].startswith("prompt is too long")


def test_structured_output_parses_into_its_model(claude):
    # `messages.parse(output_format=Model)` sends `output_config.format` (a JSON Schema): the grammar holds the
    # reply to it and the SDK parses the text block into the model.
    class City(pydantic.BaseModel):
        name: str
        population: int

    m = claude.messages.parse(model=CLAUDE, max_tokens=64, extra_body={"temperature": 0},
                              output_format=City,
                              messages=[{"role": "user", "content": "Describe Paris."}])
    assert isinstance(m.parsed_output, City), m.content
    assert m.parsed_output.name.strip()
    # Streamed, with a plain schema: every text delta together is one document of it.
    schema = {"type": "object", "additionalProperties": False, "required": ["colours"],
              "properties": {"colours": {"type": "array", "items": {"enum": ["red", "green", "blue"]},
                                         "minItems": 1, "maxItems": 3}}}
    with claude.messages.stream(model=CLAUDE, max_tokens=64, extra_body={"temperature": 0},
                                output_config={"format": {"type": "json_schema", "schema": schema}},
                                messages=[{"role": "user", "content": "Name some colours."}]) as s:
        text = "".join(s.text_stream)
    colours = json.loads(text)["colours"]
    assert 1 <= len(colours) <= 3 and set(colours) <= {"red", "green", "blue"}, text
    # A format this server cannot hold the reply to is a 400 naming the field.
    with pytest.raises(anthropic.BadRequestError) as e:
        claude.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                               output_config={"format": {"type": "xml"}})
    assert "output_config.format must be" in e.value.body["error"]["message"], e.value.body
    with pytest.raises(anthropic.BadRequestError):
        claude.messages.create(model=CLAUDE, max_tokens=5, messages=[{"role": "user", "content": "x"}],
                               output_config={"effort": "enormous"})
