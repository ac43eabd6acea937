"""`agentd serve`'s `/v1/responses` through the official `openai` SDK's `responses.create` (the Responses API, as
Codex CLI speaks it): plain and streamed text with exact usage, a function tool (required, streamed argument
deltas, a round trip with its output), `text.format` json_schema, `max_output_tokens` cutting a response short,
and the 400/404 errors.

Run: `pytest tests/python` (see conftest.py for how the server is found or started).
"""

import json

import openai
import pytest

WEATHER = {
    "type": "function",
    "name": "get_weather",
    "description": "The weather in a city",
    "parameters": {
        "type": "object",
        "properties": {"city": {"type": "string", "maxLength": 30}},
        "required": ["city"],
        "additionalProperties": False,
    },
}


def chat_count(http, model, messages):
    r = http.request("POST", "/tokenize", {"model": model, "messages": messages})
    assert r.status_code == 200, r.text
    return r.json()["count"]


def test_text_with_exact_usage(client, http, model):
    r = client.responses.create(
        model=model, instructions="Answer in one word.", input="What colour is the sky?",
        max_output_tokens=16, temperature=0,
    )
    assert r.object == "response"
    assert r.status in ("completed", "incomplete")
    assert r.output_text.strip(), r
    messages = [{"role": "system", "content": "Answer in one word."},
                {"role": "user", "content": "What colour is the sky?"}]
    assert r.usage.input_tokens == chat_count(http, model, messages)
    assert r.usage.output_tokens >= 1
    assert r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens


def test_streamed_events_in_order(client, model):
    events = list(client.responses.create(model=model, input="Count from 1 to 5.", max_output_tokens=24,
                                          temperature=0, stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "response.created" and kinds[1] == "response.in_progress", kinds
    assert kinds[-1] in ("response.completed", "response.incomplete"), kinds
    assert [e.sequence_number for e in events] == list(range(len(events)))
    deltas = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    done = [e for e in events if e.type == "response.output_text.done"]
    assert len(done) == 1 and done[0].text == deltas
    final = events[-1].response
    assert final.output_text == deltas
    assert final.usage.output_tokens >= 1


def test_required_function_call_and_its_round_trip(client, model):
    r = client.responses.create(model=model, input="What is the weather in Paris?", tools=[WEATHER],
                                tool_choice="required", temperature=0, parallel_tool_calls=False)
    calls = [o for o in r.output if o.type == "function_call"]
    assert len(calls) == 1, r.output
    args = json.loads(calls[0].arguments)
    assert set(args) == {"city"} and isinstance(args["city"], str)
    assert calls[0].call_id
    follow = client.responses.create(
        model=model, tools=[WEATHER], temperature=0, max_output_tokens=40,
        input=[
            {"role": "user", "content": "What is the weather in Paris?"},
            {"type": "function_call", "call_id": calls[0].call_id, "name": "get_weather",
             "arguments": calls[0].arguments},
            {"type": "function_call_output", "call_id": calls[0].call_id, "output": "sunny, 24 C"},
        ],
        tool_choice="none",
    )
    assert follow.output_text.strip(), follow.output
    assert not [o for o in follow.output if o.type == "function_call"]


def test_streamed_function_call_arguments(client, model):
    events = list(client.responses.create(model=model, input="Weather in Oslo?", tools=[WEATHER],
                                          tool_choice={"type": "function", "name": "get_weather"},
                                          temperature=0, stream=True, parallel_tool_calls=False))
    added = [e for e in events if e.type == "response.output_item.added" and e.item.type == "function_call"]
    assert len(added) == 1
    deltas = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    done = [e for e in events if e.type == "response.function_call_arguments.done"]
    assert done and done[0].arguments == deltas
    assert json.loads(deltas)["city"]


def test_json_schema_format(client, model):
    schema = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 20},
                                               "age": {"type": "integer"}},
              "required": ["name", "age"], "additionalProperties": False}
    r = client.responses.create(model=model, input="Invent a person.", temperature=0,
                                text={"format": {"type": "json_schema", "name": "person", "schema": schema,
                                                 "strict": True}})
    doc = json.loads(r.output_text)
    assert set(doc) == {"name", "age"} and isinstance(doc["age"], int)


def test_max_output_tokens_makes_it_incomplete(client, model):
    r = client.responses.create(model=model, input="Write a long story about the sea.", max_output_tokens=3,
                                temperature=0)
    assert r.status == "incomplete"
    assert r.incomplete_details.reason == "max_output_tokens"
    assert r.usage.output_tokens == 3


def test_errors_name_the_field(client, model):
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input="hi", previous_response_id="resp_123")
    assert e.value.body["param"] == "previous_response_id"
    with pytest.raises(openai.BadRequestError) as e:
        client.responses.create(model=model, input=[{"type": "item_reference", "id": "x"}])
    assert e.value.body["param"] == "input[0].type"
    with pytest.raises(openai.NotFoundError):
        client.responses.create(model="no-such-model", input="hi")
