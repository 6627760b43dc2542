#!/usr/bin/env bash
# Written by autotune for torchtitan 0.3.0. Edit freely; rerun `autotune emit` to regenerate.
# model: llama3-70b; hardware: h100-sxm5-80gb; 16 node(s) x 8 GPUs = 128 GPUs
# plan: tp=4,pp=1,cp=16,ep=1,vp=1,sp=true,zero=3,mbs=1,recompute=none,precision=bf16,offload=none
# layout: TP4 CP16 DP2 (world size 128 = tp 4 x pp 1 x cp 16 x dp 2)
# batch: global 32 sequences of 131072 tokens = micro-batch 1 x 16 micro-batches x dp 2
# predicted: step 65.980 s, 60.5 GiB per GPU, MFU 46.8%, 497 tokens/s/GPU (autotune's analytic cost model)
# The config lives in autotune_torchtitan.py beside this script; torchtitan 0.3.0 (pip install torchtitan==0.3.0) must be installed.
#
# Run this script on each of the 16 node(s) with the same MASTER_ADDR (the first node) and MASTER_PORT;
# extra arguments are passed on to the training program. Under Slurm use `autotune emit --format slurm`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${MASTER_ADDR:-}" ]]; then MASTER_ADDR=localhost; fi
if [[ -z "${MASTER_PORT:-}" ]]; then MASTER_PORT=29500; fi
if [[ -z "${RDZV_ID:-}" ]]; then RDZV_ID=autotune; fi

export PYTHONPATH="${HERE}${PYTHONPATH:+:${PYTHONPATH}}"

TORCHTITAN_ARGS=(
    --module autotune_torchtitan
    --config autotune_plan
)

torchrun \
    --nnodes 16 \
    --nproc-per-node 8 \
    --rdzv-backend c10d \
    --rdzv-endpoint "${MASTER_ADDR}:${MASTER_PORT}" \
    --rdzv-id "$RDZV_ID" \
    -m torchtitan.train \
    "${TORCHTITAN_ARGS[@]}" \
    "$@"
