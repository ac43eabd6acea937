#!/usr/bin/env bash
# Installs what `cargo build --features cuda` needs on a machine with no GPU and no CUDA install, into one
# cache dir, and prints the environment to build with (`eval "$(scripts/cuda-toolchain.sh)"`).
#
#  - CUDA 13.0's compiler, headers and runtime from pinned pip wheels (13.0 matches driver 580; PTX built
#    with a newer nvcc would not load under it). Nothing here needs a driver.
#  - candle-core 0.11.1, copied from cargo's registry with one change: cudarc's `dynamic-linking` becomes
#    `dynamic-loading`, so the binary opens libcuda/cuBLAS/NVRTC/cuRAND when a CUDA device is first asked
#    for instead of needing them to link or to start. Builds use it through `[patch]` (scripts/cuda-build.sh).
#  - `lib/libcudart.so`, a linker script naming the static CUDA runtime: candle-kernels' quantized matmul
#    kernels ask to link `cudart`, and the static one loads the driver lazily too, so the binary still
#    starts (and falls back to the CPU) on a machine without CUDA.
#
# AGENTD_CUDA_HOME: the cache dir (default ~/.cache/agentd/cuda-13.0). Idempotent; a second run only prints.
set -euo pipefail
cd "$(dirname "$0")/.."

DIR="${AGENTD_CUDA_HOME:-$HOME/.cache/agentd/cuda-13.0}"
WHEELS=(
    nvidia-cuda-nvcc==13.0.88
    nvidia-cuda-runtime==13.0.96
    nvidia-nvvm==13.0.88
    nvidia-cuda-crt==13.0.88
    nvidia-cuda-cccl==13.0.85
)
CANDLE_VERSION=0.11.1
STAMP="$DIR/.installed-$(echo "${WHEELS[*]} candle-core-$CANDLE_VERSION" | sha256sum | cut -c1-16)"

if [ ! -e "$STAMP" ]; then
    echo "cuda-toolchain: installing into $DIR" >&2
    rm -rf "$DIR/pip" "$DIR/lib" "$DIR/candle-core-$CANDLE_VERSION"
    mkdir -p "$DIR"
    python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
        --target "$DIR/pip" "${WHEELS[@]}" >&2
    T="$DIR/pip/nvidia/cu13"
    [ -x "$T/bin/nvcc" ] || { echo "cuda-toolchain: no nvcc in $T/bin" >&2; exit 1; }
    [ -f "$T/lib/libcudart_static.a" ] || { echo "cuda-toolchain: no libcudart_static.a" >&2; exit 1; }

    mkdir -p "$DIR/lib"
    printf 'INPUT(%s -lrt -lpthread -ldl)\n' "$T/lib/libcudart_static.a" > "$DIR/lib/libcudart.so"

    # candle-core's source as cargo fetched it for this project's lock file.
    cargo fetch --quiet >&2
    SRC="$(cargo metadata --format-version 1 | python3 -c '
import json, os, sys
for p in json.load(sys.stdin)["packages"]:
    if p["name"] == "candle-core" and p["version"] == sys.argv[1]:
        print(os.path.dirname(p["manifest_path"]))
' "$CANDLE_VERSION")"
    [ -n "$SRC" ] || { echo "cuda-toolchain: candle-core $CANDLE_VERSION is not in the lock file" >&2; exit 1; }
    cp -r "$SRC" "$DIR/candle-core-$CANDLE_VERSION"
    TOML="$DIR/candle-core-$CANDLE_VERSION/Cargo.toml"
    grep -q '"dynamic-linking"' "$TOML" || { echo "cuda-toolchain: $TOML has no dynamic-linking" >&2; exit 1; }
    sed -i 's/"dynamic-linking"/"dynamic-loading"/' "$TOML"
    touch "$STAMP"
fi

T="$DIR/pip/nvidia/cu13"
cat <<ENV
export CUDA_ROOT="$T"
export CUDA_PATH="$T"
export CUDA_HOME="$T"
export PATH="$T/bin:\$PATH"
export LIBRARY_PATH="$DIR/lib\${LIBRARY_PATH:+:\$LIBRARY_PATH}"
export CUDA_COMPUTE_CAP="\${CUDA_COMPUTE_CAP:-90}"
export AGENTD_CANDLE_CORE_PATCH="$DIR/candle-core-$CANDLE_VERSION"
ENV
