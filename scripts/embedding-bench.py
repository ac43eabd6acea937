#!/usr/bin/env python3
"""Embedding throughput (texts/s) at batch 1 and 32, side by side on the same texts and threads:
agentd's /v1/embeddings, sentence-transformers in-process (torch, CPU) and llama.cpp's llama-server /v1/embeddings
on the same model converted to GGUF. Run it with the sentence-transformers venv (scripts/embedding-reference.sh
makes it), e.g.

    $AGENTD_HOME/venv-st/bin/python scripts/embedding-bench.py --folder DIR --agentd target/release/agentd \
        --llama-server PATH --gguf minilm-f32.gguf --threads 2

Batch 1 sends one text per request, one request at a time; batch 32 sends 32 texts per request (for
sentence-transformers: one `encode` call per list of the same texts). A server is warmed up before it is timed.
Missing --agentd / --llama-server skip that row.
"""

import argparse
import json
import re
import subprocess
import sys
import time
import urllib.request

WORDS = ("the a of river stone light green house music north paper cloud quick brown fox jumps over lazy dog "
         "server model vector search token batch thread kernel memory cache query answer").split()


def corpus(n):
    """n deterministic sentences of 8 to 40 words."""
    out, state = [], 12345
    for i in range(n):
        state = (state * 1103515245 + 12345) % (1 << 31)
        length = 8 + state % 33
        out.append(" ".join(WORDS[(state >> 3) * (j + 1) % len(WORDS)] for j in range(length)) + ".")
    return out


def post(url, body):
    req = urllib.request.Request(url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"})
    with urllib.request.urlopen(req, timeout=600) as r:
        return json.loads(r.read())


def http_rate(url, model, texts, batch):
    post(url, {"model": model, "input": texts[:batch]})  # warm up
    start = time.perf_counter()
    for i in range(0, len(texts), batch):
        answer = post(url, {"model": model, "input": texts[i:i + batch]})
        assert len(answer["data"]) == len(texts[i:i + batch])
    return len(texts) / (time.perf_counter() - start)


def start(cmd, pattern):
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        m = re.search(pattern, line)
        if m:
            return proc, m.group(1)
    raise SystemExit(f"{cmd[0]} did not start")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--folder", required=True)
    ap.add_argument("--agentd")
    ap.add_argument("--llama-server")
    ap.add_argument("--gguf")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--texts", type=int, default=256)
    args = ap.parse_args()
    texts = corpus(args.texts)
    rows = []

    import torch
    from sentence_transformers import SentenceTransformer
    torch.set_num_threads(args.threads)
    st = SentenceTransformer(args.folder, device="cpu")
    st.encode(texts[:32], batch_size=32)
    for batch in (1, 32):
        t = time.perf_counter()
        # The same lists the servers get, one encode call each (encode sorts by length only within a call).
        for i in range(0, len(texts), batch):
            st.encode(texts[i:i + batch], batch_size=batch)
        rows.append(("sentence-transformers (torch, in-process)", batch, len(texts) / (time.perf_counter() - t)))

    if args.agentd:
        proc, root = start([args.agentd, "serve", "--port", "0", "--offline", "--threads", str(args.threads),
                            "--model", "all-minilm-l6-v2"], r"(http://127\.0\.0\.1:\d+)")
        try:
            for batch in (1, 32):
                rows.append(("agentd /v1/embeddings", batch,
                             http_rate(f"{root}/v1/embeddings", "all-minilm-l6-v2", texts, batch)))
        finally:
            proc.terminate()
            proc.wait()

    if args.llama_server and args.gguf:
        port = 18931
        proc = subprocess.Popen([args.llama_server, "-m", args.gguf, "--embedding", "--pooling", "mean",
                                 "-t", str(args.threads), "-c", "2048", "-b", "2048", "-ub", "2048",
                                 "--port", str(port)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            for _ in range(600):
                try:
                    urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1)
                    break
                except Exception:
                    time.sleep(0.2)
            for batch in (1, 32):
                rows.append(("llama-server /v1/embeddings", batch,
                             http_rate(f"http://127.0.0.1:{port}/v1/embeddings", "x", texts, batch)))
        finally:
            proc.terminate()
            proc.wait()

    print(f"{len(texts)} texts of 8-40 words, {args.threads} threads")
    print("| engine | batch | texts/s |\n|---|---|---|")
    for name, batch, rate in rows:
        print(f"| {name} | {batch} | {rate:.1f} |")


if __name__ == "__main__":
    sys.exit(main())
