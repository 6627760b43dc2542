#!/usr/bin/env bash
# Written by autotune for Megatron-LM core_r0.19 (megatron-core 0.19.2). Edit freely; rerun `autotune emit` to regenerate.
# model: llama3-70b; hardware: h100-sxm5-80gb; 16 node(s) x 8 GPUs = 128 GPUs
# plan: tp=4,pp=1,cp=16,ep=1,vp=1,sp=true,zero=3,mbs=1,recompute=none,precision=bf16,offload=none
# layout: TP4 CP16 DP2 (world size 128 = tp 4 x pp 1 x cp 16 x dp 2)
# batch: global 32 sequences of 131072 tokens = micro-batch 1 x 16 micro-batches x dp 2
# predicted: step 65.980 s, 60.5 GiB per GPU, MFU 46.8%, 497 tokens/s/GPU (autotune's analytic cost model)
# TRAINING_ARGS are placeholders (run length, learning rate, logging): set your own.
# Without --data-path, Megatron trains on mock data with a NullTokenizer of the model's vocabulary.
#
# Run this script on each of the 16 node(s) with the same MASTER_ADDR (the first node) and MASTER_PORT;
# extra arguments are passed on to the training program. Under Slurm use `autotune emit --format slurm`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${MASTER_ADDR:-}" ]]; then MASTER_ADDR=localhost; fi
if [[ -z "${MASTER_PORT:-}" ]]; then MASTER_PORT=29500; fi
if [[ -z "${RDZV_ID:-}" ]]; then RDZV_ID=autotune; fi

# A checkout of Megatron-LM at core_r0.19 (it holds pretrain_gpt.py).
if [[ -z "${MEGATRON_LM_DIR:-}" ]]; then MEGATRON_LM_DIR=Megatron-LM; fi

MODEL_ARGS=(
    --num-layers 80
    --hidden-size 8192
    --ffn-hidden-size 28672
    --num-attention-heads 64
    --group-query-attention
    --num-query-groups 8
    --seq-length 131072
    --max-position-embeddings 131072
    --position-embedding-type rope
    --rotary-base 500000
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --normalization RMSNorm
    --attention-dropout 0.0
    --hidden-dropout 0.0
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 4
    --pipeline-model-parallel-size 1
    --context-parallel-size 16
    --sequence-parallel
    --tp-comm-overlap
    --use-megatron-fsdp
    --data-parallel-sharding-strategy optim_grads_params
    --ckpt-format fsdp_dtensor
    --overlap-grad-reduce
    --overlap-param-gather
)
RECOMPUTE_ARGS=()
PRECISION_ARGS=(
    --bf16
)
BATCH_ARGS=(
    --micro-batch-size 1
    --global-batch-size 32
)
DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 128256
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
    --nnodes 16 \
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
