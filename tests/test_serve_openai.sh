#!/usr/bin/env bash
# attn serve's tool calls with the real `openai` package and the real SmolLM2-135M-Instruct
# (tests/serve_openai_tools.py: tool_choice named, required and none, streamed argument pieces,
# a tool's result sent back).  Needs ATTN_SMOLLM2_GGUF (the Q4_1 GGUF file) and a Python with
# the openai package (ATTN_OPENAI_PYTHON, else python3); skipped (77), saying which is missing,
# without them.  .ci/run provides both.
#   bash test_serve_openai.sh ATTN        (run in tests/; registered with label serve)
set -u
ATTN=$1
PY=${ATTN_OPENAI_PYTHON:-python3}
if [ -z "${ATTN_SMOLLM2_GGUF:-}" ] || [ ! -f "$ATTN_SMOLLM2_GGUF" ]; then
    echo "SKIP: ATTN_SMOLLM2_GGUF (SmolLM2-135M-Instruct Q4_1 GGUF) is not set"
    exit 77
fi
if ! "$PY" -c 'import openai' 2>/dev/null; then
    echo "SKIP: $PY has no openai package (set ATTN_OPENAI_PYTHON)"
    exit 77
fi
exec "$PY" "$(dirname "$0")/serve_openai_tools.py" "$ATTN" "$ATTN_SMOLLM2_GGUF" \
    fixtures/chat/templates/qwen2.5.jinja
