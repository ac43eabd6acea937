#!/usr/bin/env python3
"""llama.cpp's pooled embeddings of a chat model, the reference for `agentd serve --pooling` (issue 52):
tests/data/real/pooled_embeddings.json.

Starts llama.cpp's native `llama-server --embeddings --pooling P` (P = mean, last, cls) on the GGUF given, posts
varied texts (code, accents, CJK, emoji, one token, a few hundred tokens) to its /v1/embeddings (L2-normalised,
its default), and records per pooling each text's token count and vector (7 decimals) with the GGUF's sha256.
Only the standard library; build llama-server with ../shared/refbench/build_llama_server.sh.

    scripts/pooled_embedding_reference.py --llama-server ~/.cache/agentd/ref/llama-server \\
        --gguf "$(agentd model path smollm2-135m-instruct)" --model smollm2-135m-instruct
"""

import argparse
import hashlib
import json
import socket
import subprocess
import time
import urllib.request

TEXTS = [
    ("one_token", "hello"),
    ("sentence", "The quick brown fox jumps over the lazy dog."),
    ("python_code", "def fib(n):\n    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"),
    ("rust_code", "fn main() {\n    let v: Vec<u32> = (0..10).map(|x| x * x).collect();\n    println!(\"{:?}\", v);\n}"),
    ("accents_cjk_emoji", "Grüße aus Köln, café 🍕 — 東京は日本の首都です。"),
    ("json", '{"name": "agentd", "tags": ["gpu", "local"], "version": 1.5}'),
    ("long", " ".join(f"word{i % 37} and line {i}." for i in range(120))),
]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def post(url, body):
    req = urllib.request.Request(url, json.dumps(body).encode(), {"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=300) as r:
        return json.load(r)


def embed_with(server, gguf, pooling, threads):
    port = free_port()
    proc = subprocess.Popen(
        [server, "-m", gguf, "--host", "127.0.0.1", "--port", str(port), "-t", str(threads), "-c", "4096", "-b", "4096", "-ub", "4096",
         "--embeddings", "--pooling", pooling],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        root = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                with urllib.request.urlopen(root + "/health", timeout=2) as r:
                    if r.status == 200:
                        break
            except OSError:
                time.sleep(0.2)
        out = []
        for name, text in TEXTS:
            answer = post(root + "/v1/embeddings", {"input": text})
            out.append({
                "name": name,
                "text": text,
                "tokens": answer["usage"]["prompt_tokens"],
                "vector": [round(x, 7) for x in answer["data"][0]["embedding"]],
            })
        return out
    finally:
        proc.terminate()
        proc.wait()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--llama-server", required=True)
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--model", required=True, help="the agentd model name of the GGUF")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--out", default="tests/data/real/pooled_embeddings.json")
    args = ap.parse_args()
    with open(args.gguf, "rb") as f:
        sha = hashlib.file_digest(f, "sha256").hexdigest()
    version = subprocess.run([args.llama_server, "--version"], capture_output=True, text=True)
    doc = {
        "model": args.model,
        "gguf_sha256": sha,
        "reference": "llama.cpp llama-server --embeddings --pooling P, /v1/embeddings (L2-normalised)",
        "llama_cpp_version": (version.stdout + version.stderr).strip().splitlines()[0:1],
        "poolings": {p: embed_with(args.llama_server, args.gguf, p, args.threads) for p in ["mean", "last", "cls"]},
    }
    with open(args.out, "w") as f:
        json.dump(doc, f, ensure_ascii=False)
        f.write("\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
