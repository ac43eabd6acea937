#!/usr/bin/env bash
# Installs the real coding clients the client tests drive (tests/python/test_clients.py) into a cache beside the
# model cache, from the package registries through their normal clients:
#   $AGENTD_HOME/npm         Codex CLI (@openai/codex), Claude Code (@anthropic-ai/claude-code),
#                            Pi's coding agent (@mariozechner/pi-coding-agent), Continue's CLI (@continuedev/cli,
#                            `cn`), OpenCode (opencode-ai); the Ollama API's JavaScript clients: the `ollama`
#                            library and the Vercel AI SDK (`ai`) with its Ollama provider (ollama-ai-provider-v2)
#   $AGENTD_HOME/venv-aider  aider (pip aider-chat)
# Versions are pinned so a test run means the same thing tomorrow; rerunning is a no-op when they are there.
set -euo pipefail
AGENTD_HOME="${AGENTD_HOME:-$HOME/.cache/agentd}"
NPM_DIR="$AGENTD_HOME/npm"
AIDER_VENV="$AGENTD_HOME/venv-aider"

CODEX=0.171.0
CLAUDE=2.1.332
PI=0.73.1
CONTINUE=1.5.47
OPENCODE=1.18.33
OLLAMA_JS=0.6.4
AI_SDK=7.0.185
OLLAMA_AI_PROVIDER=4.0.1
ZOD=4.6.7
AIDER=0.86.2

mkdir -p "$NPM_DIR"
have() { [ -f "$NPM_DIR/node_modules/$1/package.json" ] && grep -q "\"version\": \"$2\"" "$NPM_DIR/node_modules/$1/package.json"; }
if ! have @openai/codex "$CODEX" || ! have @anthropic-ai/claude-code "$CLAUDE" || ! have @mariozechner/pi-coding-agent "$PI" \
    || ! have @continuedev/cli "$CONTINUE" || ! have opencode-ai "$OPENCODE" || ! have ollama "$OLLAMA_JS" \
    || ! have ai "$AI_SDK" || ! have ollama-ai-provider-v2 "$OLLAMA_AI_PROVIDER" || ! have zod "$ZOD"; then
    if ! command -v npm >/dev/null; then
        echo "npm is needed to install the npm clients" >&2
        exit 1
    fi
    (cd "$NPM_DIR" && npm install --no-audit --no-fund --loglevel=error \
        "@openai/codex@$CODEX" "@anthropic-ai/claude-code@$CLAUDE" "@mariozechner/pi-coding-agent@$PI" \
        "@continuedev/cli@$CONTINUE" "opencode-ai@$OPENCODE" "ollama@$OLLAMA_JS" "ai@$AI_SDK" \
        "ollama-ai-provider-v2@$OLLAMA_AI_PROVIDER" "zod@$ZOD")
fi

if [ ! -x "$AIDER_VENV/bin/aider" ] || ! "$AIDER_VENV/bin/python" -m pip show aider-chat 2>/dev/null | grep -q "^Version: $AIDER$"; then
    [ -x "$AIDER_VENV/bin/python" ] || python3 -m venv "$AIDER_VENV"
    "$AIDER_VENV/bin/python" -m pip install --quiet --disable-pip-version-check "aider-chat==$AIDER"
fi
echo "clients in $NPM_DIR/node_modules/.bin (codex, claude, pi, cn, opencode) and $AIDER_VENV/bin/aider"
