#!/usr/bin/env python3
"""sentence-transformers' reference embeddings of all-MiniLM-L6-v2 for agentd (issue 52):
tests/data/real/minilm_embeddings.json.

Encodes varied texts (code, accents, CJK, emoji, right-to-left scripts, one token, and texts of exactly 128, 256
and 512 tokens and longer: sentence-transformers truncates at the folder's max_seq_length) with
sentence-transformers on the CPU, from the folder `agentd model pull all-minilm-l6-v2` unpacked, and records each
text, its token count before truncation and its vector (7 decimals). The safetensors' sha256 is recorded and
checked by the tests. Run it through scripts/embedding-reference.sh (which makes the venv).
"""

import argparse
import hashlib
import json
import sys

import sentence_transformers
import torch
from sentence_transformers import SentenceTransformer

WORDS = ["alpha", "river", "stone", "light", "green", "house", "music", "north", "paper", "cloud"]

TEXTS = [
    ("one_token", "hello"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("upper_case", "THE QUICK BROWN FOX JUMPS OVER THE LAZY DOG"),
    ("question", "How do I reverse a linked list in place?"),
    ("rust_code", "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}"),
    ("python_code", "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"),
    ("json", '{"name": "agentd", "tags": ["gpu", "local"], "version": 1.5, "ok": true}'),
    ("accents", "Grüße aus Köln: café, naïve façade, Ærøskøbing, señor."),
    ("cjk", "東京は日本の首都です。北京是中国的首都。서울은 한국의 수도입니다."),
    ("emoji", "I love pizza 🍕🔥 and parties 🎉🎉 😀"),
    ("only_emoji", "🙂"),
    ("rtl", "مرحبا بالعالم. שלום עולם."),
    ("cyrillic", "Привет, мир! Как дела?"),
    ("whitespace", "   spaces\tand\ttabs\n\nand newlines   "),
    ("url_numbers", "See https://example.com/a/b?q=1&r=2 — costs $3.50 on 2024-01-01 at 12:30."),
    ("punctuation", "!!! ??? ... ;;; ---"),
]


def text_of_tokens(tokenizer, target):
    """A text of words that tokenizes to exactly `target` ids ([CLS] and [SEP] included)."""
    n = max(1, target - 2)
    shift = target // 128  # each length starts differently, so the truncated ones differ too
    for _ in range(50):
        text = " ".join(WORDS[(i + shift) % len(WORDS)] + ("." if i % 12 == 11 else "") for i in range(n))
        count = len(tokenizer(text)["input_ids"])
        if count == target:
            return text
        n += target - count
    raise SystemExit(f"could not make a text of {target} tokens")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True, help="the unpacked all-MiniLM-L6-v2 folder")
    ap.add_argument("--out", default="tests/data/real/minilm_embeddings.json")
    args = ap.parse_args()
    torch.set_num_threads(2)
    model = SentenceTransformer(args.folder, device="cpu")
    tokenizer = model.tokenizer
    texts = list(TEXTS)
    for target in (128, 256, 512):
        texts.append((f"tokens_{target}", text_of_tokens(tokenizer, target)))
    texts.append(("tokens_900", text_of_tokens(tokenizer, 900)))
    vectors = model.encode([t for _, t in texts], batch_size=32, convert_to_numpy=True)
    with open(f"{args.folder}/model.safetensors", "rb") as f:
        sha = hashlib.sha256(f.read()).hexdigest()
    out = {
        "model": "all-minilm-l6-v2",
        "safetensors_sha256": sha,
        "reference": f"sentence-transformers {sentence_transformers.__version__}, torch {torch.__version__}, CPU",
        "max_seq_length": model.max_seq_length,
        "texts": [
            {
                "name": name,
                "text": text,
                "tokens": len(tokenizer(text)["input_ids"]),
                "embedding": [round(float(x), 7) for x in vec],
            }
            for (name, text), vec in zip(texts, vectors)
        ],
    }
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {len(texts)} texts to {args.out}", file=sys.stderr)


if __name__ == "__main__":
    main()
