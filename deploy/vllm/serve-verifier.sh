#!/usr/bin/env bash
# Verifier server of the DBPM loop: MMed-Llama-3.1-70B on GPUs 2-3 (tensor parallel 2), port 8001, with the
# generator's vLLM parameters (DBPM paper Appendix A.3: "identical vLLM parameters"). Verdicts are greedy
# and capped at 60 tokens by clingate per call (streams/llm/calls.py).
# MODEL: the Hugging Face id or local path of your MMed-Llama-3.1-70B checkpoint (the paper cites Qiu et
# al., 2024; use the instruction-tuned release you are licensed for).
# Override with env: MODEL, SERVED_NAME, PORT, GPUS, TP, API_KEY.
set -euo pipefail
: "${MODEL:?set MODEL to the MMed-Llama-3.1-70B checkpoint (Hugging Face id or local path)}"
SERVED_NAME=${SERVED_NAME:-verifier}
PORT=${PORT:-8001}
GPUS=${GPUS:-2,3}
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
