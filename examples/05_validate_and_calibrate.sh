#!/usr/bin/env bash
# Check the cost model against measured runs of your own (here eight published llm-foundry runs on 8 H100s), fit
# the hardware profile's efficiency parameters to them, and plan with the fitted overlay.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(mktemp -d)}

autotune validate "$HERE/data/my_runs.csv"
autotune calibrate "$HERE/data/my_runs.csv" --out "$OUT/calibration.yaml"
autotune validate "$HERE/data/my_runs.csv" --calibration "$OUT/calibration.yaml" --worst 3
autotune search --model llama3-8b --hardware h100-sxm5-80gb --gpus 8 --seq-len 8192 --global-batch 64 \
    --top 3 --calibration "$OUT/calibration.yaml"
