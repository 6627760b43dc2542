#!/usr/bin/env bash
# Written by autotune for Megatron-LM core_r0.19 (megatron-core 0.19.2). Edit freely; rerun `autotune emit` to regenerate.
# model: gpt3-175b; hardware: a100-sxm4-80gb; 128 node(s) x 8 GPUs = 1024 GPUs
# plan: tp=4,pp=8,cp=1,ep=1,vp=4,sp=true,zero=1,mbs=1,recompute=none,precision=bf16,offload=none
# layout: TP4 PP8x4 DP32 (world size 1024 = tp 4 x pp 8 x cp 1 x dp 32)
# batch: global 1536 sequences of 2048 tokens = micro-batch 1 x 48 micro-batches x dp 32
# predicted: step 15.580 s, 60.8 GiB per GPU, MFU 67.1%, 197 tokens/s/GPU (autotune's analytic cost model)
# TRAINING_ARGS are placeholders (run length, learning rate, logging): set your own.
# Without --data-path, Megatron trains on mock data with a NullTokenizer of the model's vocabulary.
#
# Run this script on each of the 128 node(s) with the same MASTER_ADDR (the first node) and MASTER_PORT;
# extra arguments are passed on to the training program. Under Slurm use `autotune emit --format slurm`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${MASTER_ADDR:-}" ]]; then MASTER_ADDR=localhost; fi
if [[ -z "${MASTER_PORT:-}" ]]; then MASTER_PORT=29500; fi
if [[ -z "${RDZV_ID:-}" ]]; then RDZV_ID=autotune; fi

# A checkout of Megatron-LM at core_r0.19 (it holds pretrain_gpt.py).
if [[ -z "${MEGATRON_LM_DIR:-}" ]]; then MEGATRON_LM_DIR=Megatron-LM; fi

export CUDA_DEVICE_MAX_CONNECTIONS=1

MODEL_ARGS=(
    --num-layers 96
    --hidden-size 12288
    --ffn-hidden-size 49152
    --num-attention-heads 96
    --seq-length 2048
    --max-position-embeddings 2048
    --position-embedding-type learned_absolute
    --normalization LayerNorm
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 4
    --pipeline-model-parallel-size 8
    --num-virtual-stages-per-pipeline-rank 4
    --context-parallel-size 1
    --sequence-parallel
    --tp-comm-overlap
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
)
RECOMPUTE_ARGS=()
PRECISION_ARGS=(
    --bf16
)
BATCH_ARGS=(
    --micro-batch-size 1
    --global-batch-size 1536
)
DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 51200
)
TRAINING_ARGS=(
    --train-iters 1000
    --lr 1.0e-4
    --min-lr 1.0e-5
    --lr-decay-style cosine
    --lr-warmup-fraction 0.01
    --weight-decay 0.1
    --clip-grad 1.0
    --adam-beta1 0.9
    --adam-beta2 0.95
    --init-method-std 0.02
    --log-interval 1
    --eval-iters 0
)

torchrun \
    --nnodes 128 \
    --nproc-per-node 8 \
    --rdzv-backend c10d \
    --rdzv-endpoint "${MASTER_ADDR}:${MASTER_PORT}" \
    --rdzv-id "$RDZV_ID" \
    "${MEGATRON_LM_DIR}/pretrain_gpt.py" \
    "${MODEL_ARGS[@]}" \
    "${PARALLEL_ARGS[@]}" \
    "${RECOMPUTE_ARGS[@]}" \
    "${PRECISION_ARGS[@]}" \
    "${BATCH_ARGS[@]}" \
    "${DATA_ARGS[@]}" \
    "${TRAINING_ARGS[@]}" \
    "$@"
