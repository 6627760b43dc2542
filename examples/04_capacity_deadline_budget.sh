#!/usr/bin/env bash
# Capacity planning: train Llama-3-70B on a budget of 1 trillion tokens within 60 days, on H100s or
# A100s, 64 to 1,024 GPUs; autotune returns the cheapest cluster that meets the deadline and the
# fastest one, with GPU-hours, money, energy and emissions (PUE and grid intensity can be set).
set -euo pipefail

autotune search --model llama3-70b --hardware h100-sxm5-80gb,a100-sxm4-80gb --gpus 64..1024 \
    --seq-len 8192 --global-batch 1024 --tokens 1e12 --deadline 60d --objective cost \
    --pue 1.2 --grid-intensity 400
