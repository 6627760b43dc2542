#!/usr/bin/env bash
# Plan your own model from its Hugging Face config.json (here Qwen3-32B's) on 32 H100s, and write
# the plans with a Megatron-LM launch script for the best plan Megatron-LM can express.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(mktemp -d)}

autotune models show "$HERE/data/qwen3-32b-config.json"
autotune search --model "$HERE/data/qwen3-32b-config.json" --hardware h100-sxm5-80gb --gpus 32 \
    --seq-len 4096 --global-batch 256 --top 3 --emit megatron --out "$OUT/qwen3-32b"
ls "$OUT/qwen3-32b"
