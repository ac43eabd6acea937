#!/usr/bin/env bash
# The prepared GPU check: everything a machine with an NVIDIA GPU, no Rust toolchain and no network needs to
# say whether agentd's CUDA path is right and how fast it is. Two halves:
#
#   scripts/gpu-check.sh --prepare    here (any Linux machine): builds the CUDA binary (scripts/cuda-build.sh)
#                                     and the tokenizer-only GGUFs the dummy models copy; all of it in dist/
#                                     (about 21 MB: the stripped binary xz-compressed, two vocabularies).
#   scripts/gpu-check.sh [OUT]        there, from the repository root with dist/ beside it: writes
#                                     OUT/summary.json (default $OUT, else /tmp/gpu-check) and one file per
#                                     step, in under 8 minutes. Each step has its own time limit; a failed step
#                                     is recorded and the rest still run.
#
# What it measures: GPU name, driver and memory; `agentd bench parity` (synthetic Qwen2 and Gemma 3 on the CPU
# engine vs CUDA, and every kernel vs its CPU twin); for dummy Qwen2 0.5B and 7B (Q4_K_M, random weights):
# load time, prefill and decode tok/s with our fused kernels and with candle's ops, peak VRAM (nvidia-smi);
# streaming throughput at 1/8/32 concurrent clients on the 0.5B; the same 7B shape in PyTorch + transformers
# bf16 `generate()` (scripts/hf_baseline.py) as the anchor. The summary sets each decode rate against the HBM
# bound: weight bytes per token ÷ 4.8 TB/s (H200).
#
# A dry run of the plumbing on any machine: GPU_CHECK_DEVICE=cpu GPU_CHECK_SHAPES=qwen2:tiny (the
# defaults are cuda and "qwen2:0.5b qwen2:7b"; the throughput runs use the first shape, the anchor the last).
set -uo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" = "--prepare" ]; then
    set -e
    scripts/cuda-build.sh
    HOST_BIN="${CARGO_TARGET_DIR:-$HOME/.cache/agentd/cargo-target}/release/agentd"
    [ -x "$HOST_BIN" ] || cargo build --release --bin agentd
    "$HOST_BIN" model vocab --from qwen2.5-coder-0.5b-instruct --out dist/qwen-vocab.gguf
    "$HOST_BIN" model vocab --from smollm2-135m-instruct --out dist/smollm2-vocab.gguf
    du -ch dist/agentd-cuda.xz dist/*.gguf >&2
    exit 0
fi

OUT="${1:-${OUT:-/tmp/gpu-check}}"
mkdir -p "$OUT"
LOG="$OUT/log.txt"
: > "$LOG"
say() { echo "== $*" | tee -a "$LOG" >&2; }
STEPS=()
# step NAME SECONDS CMD…: runs CMD with a limit, stdout to OUT/NAME.json, stderr to the log; records the status.
START=$(date +%s)
DEADLINE=${GPU_CHECK_SECONDS:-460}  # the whole run stays under 8 minutes: later steps are skipped, not cut
step() {
    local name=$1 limit=$2
    shift 2
    local left=$((DEADLINE - ($(date +%s) - START)))
    if [ "$left" -lt 10 ]; then
        say "$name skipped: out of time"
        STEPS+=("{\"step\": \"$name\", \"exit\": null, \"skipped\": \"out of time\"}")
        return
    fi
    [ "$limit" -gt "$left" ] && limit=$left
    say "$name (limit ${limit}s)"
    local t0=$(date +%s.%N)
    timeout "$limit" "$@" > "$OUT/$name.json" 2>> "$LOG"
    local rc=$?
    local t1=$(date +%s.%N)
    STEPS+=("{\"step\": \"$name\", \"exit\": $rc, \"seconds\": $(awk "BEGIN { print $t1 - $t0 }")}")
    echo "   exit $rc" | tee -a "$LOG" >&2
}

BIN=/tmp/agentd-cuda
if command -v xz >/dev/null; then
    xz -dc dist/agentd-cuda.xz > "$BIN"
else
    python3 -c 'import lzma, shutil, sys; shutil.copyfileobj(lzma.open(sys.argv[1]), open(sys.argv[2], "wb"))' \
        dist/agentd-cuda.xz "$BIN"
fi
chmod +x "$BIN"

# candle opens cuBLAS, cuRAND and NVRTC at run time: the image keeps them in its Python packages.
LIBS=$(python3 - <<'PY' 2>/dev/null
import glob, os, site
dirs = set()
for root in site.getsitepackages() + [site.getusersitepackages()]:
    for lib in glob.glob(os.path.join(root, "nvidia", "**", "lib", "*.so*"), recursive=True):
        dirs.add(os.path.dirname(lib))
print(":".join(sorted(dirs)))
PY
)
export LD_LIBRARY_PATH="${LIBS}:/usr/local/cuda/lib64:/usr/local/nvidia/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
DEVICE="${GPU_CHECK_DEVICE:-cuda}"
read -r -a SHAPES <<< "${GPU_CHECK_SHAPES:-qwen2:0.5b qwen2:7b}"
FIRST=${SHAPES[0]/:/-}
LAST=${SHAPES[-1]}
export AGENTD_HOME=/tmp/agentd-home AGENTD_LOG=warn
mkdir -p "$AGENTD_HOME"
QV=dist/qwen-vocab.gguf
SV=dist/smollm2-vocab.gguf

step gpu 30 nvidia-smi --query-gpu=name,driver_version,memory.total,compute_cap --format=csv,noheader
step parity-qwen2 120 "$BIN" bench parity --device "$DEVICE" --dummy qwen2:tiny --tokenizer-from "$QV" --tokens 32
step parity-gemma3 60 "$BIN" bench parity --device "$DEVICE" --dummy gemma3:tiny --tokenizer-from "$SV" --tokens 32
# The baseline for judging the figures above: candle's own CUDA ops against the CPU engine, the same way (the
# logits of any two quantized paths differ somewhat: activations are quantized differently, Q8_1 vs Q8_K).
step parity-qwen2-candle-ops 60 env AGENTD_CANDLE_OPS=candle "$BIN" bench parity --device "$DEVICE" --dummy qwen2:tiny \
    --tokenizer-from "$QV" --tokens 32

# Peak GPU memory while a step runs, from nvidia-smi every 100 ms, minus what was in use before it.
vram_step() {
    local name=$1
    shift
    local base
    base=$(nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits | head -1)
    nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 100 > "$OUT/$name.vram" 2>/dev/null &
    local sampler=$!
    step "$name" "$@"
    kill "$sampler" 2>/dev/null
    wait "$sampler" 2>/dev/null
    echo "$base" > "$OUT/$name.vram-base"
}

for spec in "${SHAPES[@]}"; do
    tag=${spec/:/-}
    # Write the dummy model once, outside the timed steps.
    step "synth-$tag" 150 "$BIN" model synth "$spec" --tokenizer-from "$QV" --out "$AGENTD_HOME/dummy-$tag.gguf"
    for ops in fused candle; do
        vram_step "bench-$tag-$ops" 120 env AGENTD_CANDLE_OPS=$ops "$BIN" bench engine --model-path "$AGENTD_HOME/dummy-$tag.gguf" \
            --device "$DEVICE" --prompt-tokens 512 --gen-tokens 128 --reps 3 --json
    done
done

for clients in 1 8 32; do
    step "load-$FIRST-c$clients" 90 "$BIN" bench load --model-path "$AGENTD_HOME/dummy-$FIRST.gguf" --device "$DEVICE" \
        --clients "$clients" --requests 2 --max-tokens 64 --ignore-eos --disconnect-every 0 --json
done

vram_step transformers 150 python3 scripts/hf_baseline.py --shape "$LAST" --prompt-tokens 512 --gen-tokens 128 --reps 3

printf '%s\n' "${STEPS[@]}" > "$OUT/steps.jsonl"
python3 - "$OUT" "$DEVICE" "${SHAPES[@]}" <<'PY' > "$OUT/summary.json"
import json, os, sys
out, device, shapes = sys.argv[1], sys.argv[2], sys.argv[3:]
tags = [s.replace(":", "-") for s in shapes]
HBM = 4.8e12  # H200 bytes/s

def load(name):
    try:
        with open(os.path.join(out, name + ".json")) as f:
            text = f.read()
        return json.loads(text[text.index("{"):]) if "{" in text else text.strip()
    except Exception as e:
        return {"error": str(e)}

def vram(name):
    try:
        base = float(open(os.path.join(out, name + ".vram-base")).read().strip())
        used = [float(x) for x in open(os.path.join(out, name + ".vram")).read().split() if x.strip()]
        return {"peak_mib": max(used), "above_idle_mib": max(used) - base}
    except Exception as e:
        return {"error": str(e)}

s = {"device": device, "gpu": load("gpu"), "steps": [json.loads(l) for l in open(os.path.join(out, "steps.jsonl"))]}
s["parity"] = {k: load("parity-" + k) for k in ("qwen2", "gemma3", "qwen2-candle-ops")}
s["bench"] = {}
for tag in tags:
    for ops in ("fused", "candle"):
        name = f"bench-{tag}-{ops}"
        b = load(name)
        row = {"vram": vram(name)}
        if isinstance(b, dict) and "decode_tok_s" in b:
            bound = HBM / b["weight_bytes"]
            row.update(load_s=b.get("load_s"), weight_bytes=b["weight_bytes"],
                       prefill_tok_s=b["prefill_tok_s"]["median"], decode_tok_s=b["decode_tok_s"]["median"],
                       hbm_bound_tok_s=bound, decode_share_of_bound=b["decode_tok_s"]["median"] / bound)
        else:
            row["error"] = b
        s["bench"][name] = row
s["load"] = {c: load(f"load-{tags[0]}-c{c}") for c in (1, 8, 32)}
t = load("transformers")
if isinstance(t, dict):
    t["vram"] = vram("transformers")
s["transformers"] = t
ours = s["bench"].get(f"bench-{tags[-1]}-fused", {}).get("decode_tok_s")
if ours and isinstance(t, dict) and t.get("decode_tok_s"):
    s["decode_vs_transformers"] = ours / t["decode_tok_s"]
print(json.dumps(s, indent=2))
PY
say "summary: $OUT/summary.json"
cat "$OUT/summary.json"
