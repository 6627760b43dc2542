#!/usr/bin/env bash
# Written by autotune for Megatron-LM core_r0.19 (megatron-core 0.19.2). Edit freely; rerun `autotune emit` to regenerate.
# model: mixtral-8x7b; hardware: h100-sxm5-80gb; 8 node(s) x 8 GPUs = 64 GPUs
# plan: tp=1,pp=1,cp=1,ep=8,vp=1,sp=false,zero=1,mbs=1,recompute=full,precision=bf16,offload=none
# layout: EP8 DP64 (world size 64 = tp 1 x pp 1 x cp 1 x dp 64; ep 8 nests inside dp x cp)
# batch: global 512 sequences of 4096 tokens = micro-batch 1 x 8 micro-batches x dp 64
# predicted: step 5.892 s, 53.6 GiB per GPU, MFU 44.8%, 5,561 tokens/s/GPU (autotune's analytic cost model)
# TRAINING_ARGS are placeholders (run length, learning rate, logging): set your own.
# Without --data-path, Megatron trains on mock data with a NullTokenizer of the model's vocabulary.
# mixtral-8x7b's config.json states router_aux_loss_coef 0.02 (Hugging Face's weight of one loss over all layers); --moe-aux-loss-coeff 0.01 is Megatron's per-layer weight: set it to your recipe's.
#
# Run this script on each of the 8 node(s) with the same MASTER_ADDR (the first node) and MASTER_PORT;
# extra arguments are passed on to the training program. Under Slurm use `autotune emit --format slurm`.
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${MASTER_ADDR:-}" ]]; then MASTER_ADDR=localhost; fi
if [[ -z "${MASTER_PORT:-}" ]]; then MASTER_PORT=29500; fi
if [[ -z "${RDZV_ID:-}" ]]; then RDZV_ID=autotune; fi

# A checkout of Megatron-LM at core_r0.19 (it holds pretrain_gpt.py).
if [[ -z "${MEGATRON_LM_DIR:-}" ]]; then MEGATRON_LM_DIR=Megatron-LM; fi

MODEL_ARGS=(
    --num-layers 32
    --hidden-size 4096
    --ffn-hidden-size 14336
    --num-attention-heads 32
    --group-query-attention
    --num-query-groups 8
    --seq-length 4096
    --max-position-embeddings 32768
    --position-embedding-type rope
    --rotary-base 1000000
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --normalization RMSNorm
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --num-experts 8
    --moe-router-topk 2
    --moe-ffn-hidden-size 14336
    --moe-router-load-balancing-type aux_loss
    --moe-aux-loss-coeff 0.01
    --moe-grouped-gemm
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 1
    --pipeline-model-parallel-size 1
    --context-parallel-size 1
    --expert-model-parallel-size 8
    --expert-tensor-parallel-size 1
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --moe-token-dispatcher-type alltoall
)
RECOMPUTE_ARGS=(
    --recompute-granularity full
    --recompute-method uniform
    --recompute-num-layers 1
)
PRECISION_ARGS=(
    --bf16
)
BATCH_ARGS=(
    --micro-batch-size 1
    --global-batch-size 512
)
DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 32000
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
    --nnodes 8 \
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
