#!/usr/bin/env python3
"""Reference logits from llama.cpp for agentd's synthetic checkpoints (issue 18, item 1).

For each ARCH:SIZE, `agentd model synth` writes the file (seed 0); llama.cpp (llama-cpp-python, e.g. the venv that
../shared/refbench/setup.sh builds) evaluates a fixed token sequence on it with every position's logits kept, and
this script writes tests/data/synth/<arch>-<size>.json: the file's sha256 (the Rust test checks it wrote the same
bytes), the tokens, and per position llama.cpp's top-5 (id, logit). Regenerate after changing the synthesizer:

    /path/to/refbench-venv/bin/python scripts/synth_reference.py --agentd target/release/agentd
"""

import argparse
import hashlib
import json
import os
import subprocess
import sys
import tempfile

import numpy as np
from llama_cpp import Llama

SPECS = ["llama:tiny", "llama:tiny3", "llama:mistral-tiny", "qwen2:tiny", "qwen3:tiny", "qwen3moe:tiny", "gemma3:tiny", "phi3:tiny"]
TOKENS = [300 + (i * 53) % 2000 for i in range(24)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agentd", required=True)
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "tests", "data", "synth"))
    args = ap.parse_args()
    os.makedirs(args.out, exist_ok=True)
    for spec in SPECS:
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "m.gguf")
            subprocess.run([args.agentd, "model", "synth", spec, "--out", path, "--seed", "0", "--offline"],
                           check=True, stdout=subprocess.DEVNULL)
            sha = hashlib.sha256(open(path, "rb").read()).hexdigest()
            llm = Llama(model_path=path, n_ctx=256, n_threads=2, logits_all=True, verbose=False)
            llm.eval(TOKENS)
            positions = []
            for i in range(len(TOKENS)):
                logits = np.array(llm.scores[i], dtype=np.float64)
                top = np.argsort(-logits)[:5]
                positions.append({"top": [[int(t), round(float(logits[t]), 5)] for t in top]})
            del llm
        name = spec.replace(":", "-") + ".json"
        with open(os.path.join(args.out, name), "w") as f:
            json.dump({"spec": spec, "seed": 0, "sha256": sha, "tokens": TOKENS, "positions": positions,
                       "reference": "llama.cpp via llama-cpp-python, every position's logits"}, f, indent=1)
            f.write("\n")
        print(f"{name}: {sha[:12]}, {len(positions)} positions", file=sys.stderr)


if __name__ == "__main__":
    main()
