#!/usr/bin/env python3
"""The side-by-side anchor for scripts/gpu-check.sh: a Qwen2 model of a real shape with random weights, run with
PyTorch + transformers `generate()` in bf16 on the GPU (what the lent machine's image holds). Prints one JSON
object: load (build) time, prefill tok/s (a generate of one token), decode tok/s (the rest), peak VRAM.

Shapes match `agentd model synth` (qwen2:0.5b, qwen2:7b). Greedy, no EOS stop, KV cache on (transformers'
default dynamic cache); timed with CUDA synchronisation around each call, after one warm-up.
"""
import argparse
import json
import statistics
import sys
import time

SHAPES = {
    # hidden, intermediate, layers, heads, kv heads, vocab, tied embeddings
    "qwen2:0.5b": (896, 4864, 24, 14, 2, 151936, True),
    "qwen2:1.5b": (1536, 8960, 28, 12, 2, 151936, True),
    "qwen2:7b": (3584, 18944, 28, 28, 4, 152064, False),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="qwen2:7b", choices=sorted(SHAPES))
    ap.add_argument("--prompt-tokens", type=int, default=512)
    ap.add_argument("--gen-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    args = ap.parse_args()
    out = {"shape": args.shape, "dtype": "bfloat16", "prompt_tokens": args.prompt_tokens,
           "gen_tokens": args.gen_tokens, "reps": args.reps}
    try:
        import torch
        import transformers
        from transformers import Qwen2Config, Qwen2ForCausalLM
    except Exception as e:  # the image lacks them: say so in the JSON
        out["error"] = f"import failed: {e}"
        print(json.dumps(out))
        return 1
    out["torch"] = torch.__version__
    out["transformers"] = transformers.__version__
    if not torch.cuda.is_available():
        out["error"] = "no CUDA device visible to PyTorch"
        print(json.dumps(out))
        return 1
    hidden, inter, layers, heads, kv, vocab, tied = SHAPES[args.shape]
    cfg = Qwen2Config(hidden_size=hidden, intermediate_size=inter, num_hidden_layers=layers,
                      num_attention_heads=heads, num_key_value_heads=kv, vocab_size=vocab,
                      tie_word_embeddings=tied, max_position_embeddings=32768, rope_theta=1e6,
                      torch_dtype=torch.bfloat16)
    torch.manual_seed(0)
    t0 = time.perf_counter()
    with torch.device("cuda"):
        model = Qwen2ForCausalLM(cfg).to(torch.bfloat16)
    model.eval()
    torch.cuda.synchronize()
    out["load_s"] = time.perf_counter() - t0
    out["parameters"] = sum(p.numel() for p in model.parameters())
    out["weight_bytes"] = sum(p.numel() * p.element_size() for p in model.parameters())
    ids = torch.randint(0, vocab, (1, args.prompt_tokens), device="cuda")
    mask = torch.ones_like(ids)

    def timed(n):
        torch.cuda.synchronize()
        t = time.perf_counter()
        with torch.no_grad():
            model.generate(ids, attention_mask=mask, max_new_tokens=n, min_new_tokens=n,
                           do_sample=False, pad_token_id=0)
        torch.cuda.synchronize()
        return time.perf_counter() - t

    timed(2)  # warm-up
    torch.cuda.reset_peak_memory_stats()
    prefill, decode = [], []
    for _ in range(args.reps):
        p = timed(1)
        full = timed(args.gen_tokens)
        prefill.append(args.prompt_tokens / p)
        decode.append((args.gen_tokens - 1) / max(full - p, 1e-9))
    out["prefill_tok_s"] = statistics.median(prefill)
    out["decode_tok_s"] = statistics.median(decode)
    out["decode_tok_s_all"] = decode
    out["peak_vram_mb"] = torch.cuda.max_memory_allocated() / 1e6
    out["gpu"] = torch.cuda.get_device_name(0)
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
