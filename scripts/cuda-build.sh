#!/usr/bin/env bash
# Builds agentd with `--features cuda` on any Linux machine, GPU or not: the toolchain comes from
# scripts/cuda-toolchain.sh, the CUDA libraries are opened at run time. Leaves
#   $AGENTD_CUDA_TARGET/release/agentd   (the binary; default target dir ~/.cache/agentd/cuda-target)
#   dist/agentd-cuda.xz                  (stripped and compressed: what scripts/gpu-check.sh takes to a GPU)
# Compute capability: CUDA_COMPUTE_CAP (default 90, Hopper; 80 Ampere, 89 Ada). The kernels are PTX for it,
# which the driver compiles for that GPU or any newer one.
# --clippy: also lint the library and binary as built with `cuda` (warnings are errors), as .ci/run does.
set -euo pipefail
cd "$(dirname "$0")/.."

export PIP_ROOT_USER_ACTION=ignore
eval "$(scripts/cuda-toolchain.sh)"
export CARGO_TARGET_DIR="${AGENTD_CUDA_TARGET:-$HOME/.cache/agentd/cuda-target}"

# The patched candle-core goes in through `[patch]`, which cargo records in Cargo.lock: the build runs on a
# copy of the sources (mtimes kept, so unchanged files are not rebuilt) and this tree's lock file stays as is.
SRC="$CARGO_TARGET_DIR/source"
rm -rf "$SRC"
mkdir -p "$SRC"
tar -c --exclude=./.git --exclude=./target --exclude=./dist --exclude=./.venv --exclude=./.whl --exclude=./tests \
    -f - . | tar -x -C "$SRC" -f -
PATCH="patch.crates-io.candle-core.path=\"$AGENTD_CANDLE_CORE_PATCH\""
(cd "$SRC" && cargo build --release --features cuda --bin agentd --config "$PATCH")
if [ "${1:-}" = "--clippy" ]; then
    (cd "$SRC" && cargo clippy --release --features cuda --lib --bins --config "$PATCH" -- -D warnings)
fi

mkdir -p dist
strip -o dist/agentd-cuda "$CARGO_TARGET_DIR/release/agentd"
xz -T0 -6 -f dist/agentd-cuda
ls -l dist/agentd-cuda.xz >&2
