"""schemathesis hooks for the fuzz run of `agentd serve` (tests/python/test_openapi_fuzz.py).

- Generation lengths are capped (a 135M model on two CPU cores writes ~100 tokens a second), so a few minutes
  reach every route many times instead of waiting on long answers: `max_tokens`-like fields above 8 become 8,
  `n`/`best_of` above 2 become 2, an agent session's `max_turns` above 2 becomes 2.
- `model` names the served model most of the time, so generated bodies get past the 404 of an unknown model to
  the door's own checks; one case in five keeps the generated name.
- Ollama's streamed answers (`application/x-ndjson`) are read line by line (split at "\n" only): every line must
  be a JSON object; the last one is what gets checked against the document.
- Every answer's status is counted into $AGENTD_FUZZ_STATS (JSON) for the test's summary.
"""

import atexit
import collections
import json
import os
import random

import schemathesis

CAP = 8
LENGTH_FIELDS = ("max_tokens", "max_completion_tokens", "max_output_tokens", "n_predict", "num_predict")
MODEL = os.environ.get("AGENTD_FUZZ_MODEL", "")
STATS_PATH = os.environ.get("AGENTD_FUZZ_STATS")
_statuses: collections.Counter = collections.Counter()
_by_route: dict = collections.defaultdict(collections.Counter)
_rng = random.Random(0)


def _capped(obj):
    if not isinstance(obj, dict):
        return obj
    for key in LENGTH_FIELDS:
        v = obj.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and (v > CAP or v < 0):
            obj[key] = CAP
    for key, most in (("n", 2), ("best_of", 2), ("max_turns", 2)):
        v = obj.get(key)
        if isinstance(v, int) and not isinstance(v, bool) and v > most:
            obj[key] = most
    if isinstance(obj.get("options"), dict):
        _capped(obj["options"])
    if MODEL and isinstance(obj.get("model"), str) and _rng.random() < 0.8:
        obj["model"] = MODEL
    return obj


@schemathesis.hook
def map_body(context, body):
    return _capped(body)


@schemathesis.deserializer("application/x-ndjson")
def ndjson(ctx, response):
    last = None
    # Lines end at "\n" only (as Ollama's clients split them): `str.splitlines` would also cut at U+0085 or
    # U+2028 inside a JSON string.
    for line in response.content.decode("utf-8").split("\n"):
        if not line.strip():
            continue
        last = json.loads(line)
        if not isinstance(last, dict):
            raise ValueError(f"a JSON line that is not an object: {line[:200]}")
    if last is None:
        raise ValueError("an empty JSON-lines answer")
    return last


@schemathesis.hook
def after_call(context, case, response):
    _statuses[str(response.status_code)] += 1
    _by_route[f"{case.operation.method.upper()} {case.operation.path}"][str(response.status_code)] += 1


def _write_stats():
    if STATS_PATH:
        with open(STATS_PATH, "w") as f:
            json.dump({"statuses": _statuses, "routes": _by_route}, f, indent=1, sort_keys=True)


atexit.register(_write_stats)
