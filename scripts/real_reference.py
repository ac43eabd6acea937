#!/usr/bin/env python3
"""llama.cpp reference data for agentd on real checkpoints (issue 28): tests/data/real/<model>.json.

For one GGUF file, llama.cpp (llama-cpp-python, the venv that ../shared/refbench/setup.sh builds, AMX off) records
- `tokens`: hard strings -> ids (`add_bos` as the model's metadata says, special tokens parsed);
- `greedy`: for each prompt, its ids and 40 greedy steps decoded one token at a time (as a server decodes), each
  step with the chosen id, the top-5 (id, logit) and the top1-top2 margin, so a test can demand identical tokens
  up to the first near-tie and logits within a tolerance;
- `prefill`: the top-5 logits at every position of one longer prompt evaluated as a single batch (the batched
  matmul path: prefill);
- `long`: a prompt of ~800 tokens (past Gemma 3's 512-token window) and 16 greedy steps after it.

    /tmp/ref/venv/bin/python scripts/real_reference.py --model /path/gemma-3-270m.gguf --name gemma-3-270m

Regenerate when a prompt list changes; the model file's sha256 is recorded and checked by the tests.
"""

import argparse
import hashlib
import json
import os
import sys

import numpy as np
from llama_cpp import Llama

TOKEN_CASES = [
    "Hello world",
    " Hello  world ",
    "The capital of France is",
    "naïve café — “quoted” ‘text’ … déjà vu",
    "日本語のテキストと中文字符，한국어도 있습니다。",
    "emoji 🦀🚀👍🏽 and symbols ∑∫√ ≤ ≥ ≠ → ←",
    "fn main() {\n    let x: Vec<u32> = vec![1, 2, 3];\n\tprintln!(\"{:?}\", x);\n}\n",
    "def add(a, b):\n    return a + b  # sum\n\n\nclass Foo:\n    pass\n",
    "1234567890 3.14159 -42 1e-9 0x1F 007",
    "   leading and trailing spaces   ",
    "\n\n\nnewlines\r\nand\ttabs\t\t",
    "<start_of_turn>user\nhi<end_of_turn>\n<start_of_turn>model\n",
    "<bos>text after a literal bos",
    "ALLCAPS and MiXeD CaSe and snake_case_words and camelCaseWords",
    "https://example.com/path?query=1&b=2#frag",
    "{\"name\": \"read\", \"arguments\": {\"path\": \"src/main.rs\"}}",
    "Ünïcödé Ωmega ß ẞ ﬁ ligatures",
    "a" * 40 + " " + "ab" * 20,
]

PROMPTS = [
    "The capital of France is",
    "The alphabet: A B C D E F G",
    "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n",
    "Once upon a time, in a small village by the sea,",
    "Water boils at 100 degrees Celsius. At sea level, water freezes at",
    "Here is a list of prime numbers: 2, 3, 5, 7, 11,",
    "import json\n\nwith open(\"config.json\") as f:\n",
    "Question: What is the largest planet in our solar system?\nAnswer:",
]

PREFILL_PROMPT = (
    "Gemma is a family of lightweight, state-of-the-art open models built from the same research and technology "
    "used to create other models. They are text-to-text, decoder-only large language models, available in English, "
    "with open weights for both pre-trained variants and instruction-tuned variants. They are well-suited for a "
    "variety of text generation tasks, including question answering, summarization, and reasoning. Their "
    "relatively small size makes it possible to deploy them in environments with limited resources such as a "
    "laptop, desktop or your own cloud infrastructure."
)

STEPS = 40
# A prompt longer than Gemma 3's 512-token window (the start of a standard-library module, so it is real code and
# the same on every machine with this Python), decoded past it: the sliding-window layers then mask keys.
LONG_PROMPT_CHARS = 3000
LONG_STEPS = 16
KV_TYPES = {"f32": 0, "f16": 1}  # ggml_type


def top5(logits):
    logits = np.asarray(logits, dtype=np.float64)
    top = np.argsort(-logits)[:5]
    return [[int(t), round(float(logits[t]), 4)] for t in top], float(logits[top[0]] - logits[top[1]])


def greedy_steps(llm, ids, n, stop_at_eos=True):
    """`ids` evaluated as one batch, then `n` greedy steps fed one token at a time: id, top 5, margin of each."""
    llm.reset()
    llm.eval(ids)
    steps = []
    for _ in range(n):
        top, margin = top5(llm.scores[llm.n_tokens - 1])
        tok = top[0][0]
        steps.append({"id": tok, "top": top, "margin": round(margin, 4)})
        if stop_at_eos and tok == llm.token_eos():
            break
        llm.eval([tok])
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", required=True)
    ap.add_argument("--name", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "real"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv", choices=["f16", "f32"], default="f16", help="llama.cpp's KV cache type")
    args = ap.parse_args()
    sha = hashlib.sha256(open(args.model, "rb").read()).hexdigest()
    llm = Llama(model_path=args.model, n_ctx=1024, n_batch=512, n_threads=args.threads,
                n_threads_batch=args.threads, logits_all=True, verbose=False,
                type_k=KV_TYPES[args.kv], type_v=KV_TYPES[args.kv])
    add_bos = llm.metadata.get("tokenizer.ggml.add_bos_token", "false") == "true"

    tokens = []
    for text in TOKEN_CASES:
        ids = llm.tokenize(text.encode(), add_bos=add_bos, special=True)
        plain = llm.tokenize(text.encode(), add_bos=False, special=False)
        tokens.append({"text": text, "ids": ids, "ids_no_special": plain})

    greedy = []
    for prompt in PROMPTS:
        ids = llm.tokenize(prompt.encode(), add_bos=add_bos, special=True)
        steps = greedy_steps(llm, ids, STEPS)
        text = llm.detokenize([s["id"] for s in steps]).decode("utf-8", "replace")
        greedy.append({"prompt": prompt, "prompt_ids": ids, "text": text, "steps": steps})
        print(f"{args.name}: {prompt[:30]!r} -> {text[:60]!r}", file=sys.stderr)

    ids = llm.tokenize(PREFILL_PROMPT.encode(), add_bos=add_bos, special=True)
    llm.reset()
    llm.eval(ids)
    prefill = {"prompt_ids": ids, "top": [top5(llm.scores[i])[0] for i in range(len(ids))]}

    import textwrap
    long_text = open(textwrap.__file__, encoding="utf-8").read()[:LONG_PROMPT_CHARS]
    ids = llm.tokenize(long_text.encode(), add_bos=add_bos, special=False)
    long = {"prompt_ids": ids, "steps": greedy_steps(llm, ids, LONG_STEPS, stop_at_eos=False)}
    print(f"{args.name}: long prompt of {len(ids)} tokens", file=sys.stderr)

    os.makedirs(args.out, exist_ok=True)
    path = os.path.join(args.out, args.name + ".json")
    with open(path, "w") as f:
        json.dump({"model": args.name, "sha256": sha, "add_bos": add_bos,
                   "reference": "llama.cpp (llama-cpp-python 0.3.36, AMX off), greedy decode one token at a time",
                   "kv_cache": args.kv,
                   "tokens": tokens, "greedy": greedy, "prefill": prefill, "long": long}, f, indent=1, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    main()
