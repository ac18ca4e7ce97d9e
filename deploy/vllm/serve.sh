#!/usr/bin/env bash
# The vLLM servers clingate calls, one script with a role argument:
#
#   deploy/vllm/serve.sh generator   Llama-3.3-70B-Instruct on GPUs 0-1 (tensor parallel 2), port 8000:
#                                    the DBPM loop's extraction calls.
#   deploy/vllm/serve.sh verifier    MMed-Llama-3.1-70B on GPUs 2-3 (tensor parallel 2), port 8001, with the
#                                    generator's vLLM parameters (DBPM paper Appendix A.3: "identical vLLM
#                                    parameters"). MODEL is required: the Hugging Face id or local path of
#                                    your MMed-Llama-3.1-70B checkpoint (the paper cites Qiu et al., 2024;
#                                    use the instruction-tuned release you are licensed for).
#   deploy/vllm/serve.sh medgemma    MedGemma-1.5-4B-it on one GPU, port 8002, for the DocGemma-style paths
#                                    (arbiter semantic checks: operational T=0.0 and synthesis T=0.5 / 256
#                                    tokens, DocGemma spec section 7); clingate reaches it through
#                                    CLINGATE_LLM_URL (the default role). Text only: clingate does not use
#                                    DocGemma's vision path.
#
# The two 70B servers use the DBPM paper's Table 14 settings (max-model-len 8192, max-num-seqs 256,
# gpu-memory-utilization 0.90, bfloat16, chunked prefill). Every role sets the same structured-outputs
# engine config, chosen by STRUCTURED_OUTPUTS_BACKEND (docs/llm-serving.md says why xgrammar is the
# default and when to choose Outlines):
#   xgrammar (default)  {"backend": "xgrammar", "disable_any_whitespace": true}: compact JSON, which
#                       xgrammar reads from this engine config, not from the request (streams/llm/client.py)
#   outlines            {"backend": "outlines"}: vLLM refuses disable_any_whitespace for Outlines; its
#                       JSON regex allows at most one space between tokens
# (the same configs as streams.llm.serve.vllm_inprocess.structured_outputs_config). --generation-config
# vllm stops the model's generation_config.json from changing sampling defaults. Greedy decoding and
# per-stage max_tokens are sent by clingate per call (streams/llm/calls.py).
#
# Override with env: MODEL, SERVED_NAME, PORT, GPUS, TP (70B roles), MAX_MODEL_LEN (medgemma), API_KEY
# (optional; clingate sends CLINGATE_LLM_API_KEY), STRUCTURED_OUTPUTS_BACKEND (xgrammar | outlines).
# deploy/vllm/clingate.env points clingate at the three.
set -euo pipefail

role=${1:-}
case "$role" in
  generator)
    MODEL=${MODEL:-meta-llama/Llama-3.3-70B-Instruct}
    PORT=${PORT:-8000}
    GPUS=${GPUS:-0,1}
    ;;
  verifier)
    : "${MODEL:?set MODEL to the MMed-Llama-3.1-70B checkpoint (Hugging Face id or local path)}"
    PORT=${PORT:-8001}
    GPUS=${GPUS:-2,3}
    ;;
  medgemma)
    MODEL=${MODEL:-google/medgemma-1.5-4b-it}
    PORT=${PORT:-8002}
    GPUS=${GPUS:-0}
    ;;
  *)
    echo "usage: $0 generator|verifier|medgemma   (env overrides: see the header of this script)" >&2
    exit 2
    ;;
esac
SERVED_NAME=${SERVED_NAME:-$role}

case "${STRUCTURED_OUTPUTS_BACKEND:=xgrammar}" in
  xgrammar) structured_outputs='{"backend": "xgrammar", "disable_any_whitespace": true}' ;;
  outlines) structured_outputs='{"backend": "outlines"}' ;;
  *)
    echo "STRUCTURED_OUTPUTS_BACKEND=$STRUCTURED_OUTPUTS_BACKEND: use xgrammar or outlines" >&2
    exit 2
    ;;
esac

if [ "$role" = medgemma ]; then
  role_flags=(--max-model-len "${MAX_MODEL_LEN:-8192}")
else
  role_flags=(
    --tensor-parallel-size "${TP:-2}"
    --max-model-len 8192
    --max-num-seqs 256
    --gpu-memory-utilization 0.90
    --enable-chunked-prefill
  )
fi

exec env CUDA_VISIBLE_DEVICES="$GPUS" vllm serve "$MODEL" \
  --served-model-name "$SERVED_NAME" \
  --host 0.0.0.0 --port "$PORT" \
  "${role_flags[@]}" \
  --dtype bfloat16 \
  --generation-config vllm \
  --structured-outputs-config "$structured_outputs" \
  ${API_KEY:+--api-key "$API_KEY"}
