#!/usr/bin/env bash
# A measured tune loop: the cost model queues its best plans, Optuna proposes more, and each is
# measured by your benchmark command, which reads the plan from AUTOTUNE_* variables and prints one
# JSON line. fake_benchmark.py stands in for a real training step here.
set -euo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
OUT=${OUT:-$(mktemp -d)}

autotune tune --model llama3-8b --hardware h100-sxm5-80gb --gpus 8 --seq-len 8192 --global-batch 64 \
    --run "python3 $HERE/fake_benchmark.py" --storage "sqlite:///$OUT/tune.db" --study llama8b \
    --trials 8 --prior-top 4 --seed 0
