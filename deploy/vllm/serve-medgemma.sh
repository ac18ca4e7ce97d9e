#!/usr/bin/env bash
# MedGemma-1.5-4B-it for the DocGemma-style paths (arbiter semantic checks: operational T=0.0 and synthesis
# T=0.5 / 256 tokens, DocGemma spec section 7). One GPU; clingate reaches it through CLINGATE_LLM_URL
# (the default role). Text only here: the vision path of DocGemma is not used by clingate.
# Override with env: MODEL, SERVED_NAME, PORT, GPUS, MAX_MODEL_LEN, API_KEY.
set -euo pipefail
MODEL=${MODEL:-google/medgemma-1.5-4b-it}
SERVED_NAME=${SERVED_NAME:-medgemma}
PORT=${PORT:-8002}
GPUS=${GPUS:-0}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-8192}
exec env CUDA_VISIBLE_DEVICES="$GPUS" vllm serve "$MODEL" \
  --served-model-name "$SERVED_NAME" \
  --host 0.0.0.0 --port "$PORT" \
  --max-model-len "$MAX_MODEL_LEN" \
  --dtype bfloat16 \
  --generation-config vllm \
  --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}' \
  ${API_KEY:+--api-key "$API_KEY"}
