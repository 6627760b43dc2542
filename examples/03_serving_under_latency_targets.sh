#!/usr/bin/env bash
# Serve Llama-3-70B on 8 H100s with 2,048-token prompts and 256-token answers, keeping time to
# first token under 2 s and time per output token under 50 ms; then print the vLLM command.
set -euo pipefail
OUT=${OUT:-$(mktemp -d)}

autotune search --workload serve --model llama3-70b --hardware h100-sxm5-80gb --gpus 8 \
    --input-len 2048 --output-len 256 --ttft-ms 2000 --tpot-ms 50 --top 5 --out "$OUT/serve"
autotune emit "$OUT/serve/plans.json" --format vllm
