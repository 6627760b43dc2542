#!/usr/bin/env bash
# Plan Llama-3-70B on 64 H100s (8 nodes of 8): the ranked plans, then the winner explained.
set -euo pipefail
OUT=${OUT:-$(mktemp -d)}

autotune search --model llama3-70b --hardware h100-sxm5-80gb --gpus 64 \
    --seq-len 8192 --global-batch 512 --top 5 --out "$OUT/llama3-70b"
autotune explain "$OUT/llama3-70b/plans.json" --rank 1
