"""Embeddings through the real clients, against one `agentd serve --model all-minilm-l6-v2` (the model pulled from
its pip wheel): the official `openai` SDK's `embeddings.create` (float, and base64 — the SDK's default, which it
decodes itself) and the official `ollama` library's `embed` and `embeddings`. Each vector is held to
sentence-transformers' (tests/data/real/minilm_embeddings.json) within cosine 0.9999.
"""

import json
import math

import openai
import pytest

from conftest import API_KEY, ROOT, Server

MINILM = "all-minilm-l6-v2"
REFERENCE = json.loads((ROOT / "tests/data/real/minilm_embeddings.json").read_text(encoding="utf-8"))
CASES = {c["name"]: c for c in REFERENCE["texts"]}


def cosine(a, b):
    dot = sum(x * y for x, y in zip(a, b))
    return dot / (math.sqrt(sum(x * x for x in a)) * math.sqrt(sum(y * y for y in b)))


@pytest.fixture(scope="module")
def served():
    s = Server("--model", MINILM)
    yield s
    s.stop()


@pytest.fixture(scope="module")
def sdk(served):
    return openai.OpenAI(base_url=served.base_url, api_key=API_KEY, timeout=600)


def test_openai_sdk_float_and_base64(sdk):
    names = ["sentence", "rust_code", "cjk", "emoji", "one_token"]
    texts = [CASES[n]["text"] for n in names]
    for fmt in ("float", None):  # None: the SDK asks for base64 and decodes it
        kwargs = {"encoding_format": fmt} if fmt else {}
        r = sdk.embeddings.create(model=MINILM, input=texts, **kwargs)
        assert r.model == MINILM and len(r.data) == len(texts), r
        for name, d in zip(names, r.data):
            assert len(d.embedding) == 384
            c = cosine(d.embedding, CASES[name]["embedding"])
            assert c >= 0.9999, (fmt, name, c)
        assert r.usage.prompt_tokens == sum(CASES[n]["tokens"] for n in names) == r.usage.total_tokens


def test_openai_sdk_refusals_are_bad_requests(sdk):
    with pytest.raises(openai.BadRequestError) as e:
        sdk.embeddings.create(model=MINILM, input=CASES["tokens_512"]["text"], encoding_format="float")
    assert "window is 256 tokens" in str(e.value)
    with pytest.raises(openai.BadRequestError):
        sdk.embeddings.create(model=MINILM, input=[], encoding_format="float")
    with pytest.raises(openai.BadRequestError) as e:
        sdk.chat.completions.create(model=MINILM, messages=[{"role": "user", "content": "hi"}])
    assert "embedding model" in str(e.value)


def test_ollama_library_embed_and_embeddings(served):
    ollama = pytest.importorskip("ollama")
    client = ollama.Client(host=served.root, headers={"Authorization": f"Bearer {API_KEY}"}, timeout=600)
    r = client.embed(model=MINILM, input=[CASES["accents"]["text"], CASES["tokens_900"]["text"]])
    assert len(r.embeddings) == 2, r
    assert cosine(r.embeddings[0], CASES["accents"]["embedding"]) >= 0.9999
    # Ollama truncates by default, as sentence-transformers does.
    assert cosine(r.embeddings[1], CASES["tokens_900"]["embedding"]) >= 0.9999
    assert r.prompt_eval_count == CASES["accents"]["tokens"] + 256, r
    assert r.total_duration > 0, r
    old = client.embeddings(model=MINILM, prompt=CASES["question"]["text"])
    assert cosine(old.embedding, CASES["question"]["embedding"]) >= 0.9999
    with pytest.raises(ollama.ResponseError) as e:
        client.embed(model=MINILM, input=CASES["tokens_512"]["text"], truncate=False)
    assert e.value.status_code == 400
    assert "embedding" in client.show(MINILM).capabilities
