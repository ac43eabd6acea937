#!/usr/bin/env bash
# Reference embeddings from sentence-transformers (pip, CPU) for tests/data/real/minilm_embeddings.json, and the venv
# the embedding benchmark (scripts/embedding-bench.py) compares against. The venv ($AGENTD_HOME/venv-st) holds pip's
# torch and sentence-transformers (a few GB); the model folder is the one `agentd model pull all-minilm-l6-v2` unpacks.
set -euo pipefail
cd "$(dirname "$0")/.."
AGENTD_HOME="${AGENTD_HOME:-$HOME/.cache/agentd}"
VENV="$AGENTD_HOME/venv-st"
AGENTD="${AGENTD_BIN:-${CARGO_TARGET_DIR:-target}/release/agentd}"
if [ ! -x "$VENV/bin/python" ]; then
    python3 -m venv "$VENV"
fi
"$VENV/bin/python" -c "import sentence_transformers" 2>/dev/null ||
    "$VENV/bin/pip" install --quiet --disable-pip-version-check torch sentence-transformers
FOLDER="$("$AGENTD" model pull all-minilm-l6-v2)"
"$VENV/bin/python" scripts/embedding_reference.py --folder "$FOLDER" "$@"
