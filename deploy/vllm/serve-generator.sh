#!/usr/bin/env bash
# Generator server of the DBPM loop: Llama-3.3-70B-Instruct on GPUs 0-1 (tensor parallel 2), port 8000.
# Settings: DBPM paper Appendix A.3 / Table 14 (max-model-len 8192, max-num-seqs 256, gpu-memory-utilization
# 0.90, bfloat16, chunked prefill). Structured outputs: xgrammar with compact JSON; xgrammar reads
# disable_any_whitespace from this engine config, not from the request (see streams/llm/client.py).
# Greedy decoding and per-stage max_tokens are sent by clingate per call (streams/llm/calls.py), and
# --generation-config vllm stops the model's generation_config.json from changing sampling defaults.
# Override with env: MODEL, SERVED_NAME, PORT, GPUS, TP, API_KEY (optional; clingate sends CLINGATE_LLM_API_KEY).
set -euo pipefail
MODEL=${MODEL:-meta-llama/Llama-3.3-70B-Instruct}
SERVED_NAME=${SERVED_NAME:-generator}
PORT=${PORT:-8000}
GPUS=${GPUS:-0,1}
TP=${TP:-2}
exec env CUDA_VISIBLE_DEVICES="$GPUS" vllm serve "$MODEL" \
  --served-model-name "$SERVED_NAME" \
  --host 0.0.0.0 --port "$PORT" \
  --tensor-parallel-size "$TP" \
  --max-model-len 8192 \
  --max-num-seqs 256 \
  --gpu-memory-utilization 0.90 \
  --dtype bfloat16 \
  --enable-chunked-prefill \
  --generation-config vllm \
  --structured-outputs-config '{"backend": "xgrammar", "disable_any_whitespace": true}' \
  ${API_KEY:+--api-key "$API_KEY"}
