#!/usr/bin/env bash
# Written by autotune for Megatron-LM core_r0.19 (megatron-core 0.19.2). Edit freely; rerun `autotune emit` to regenerate.
# model: deepseek-v3; hardware: h100-sxm5-80gb; 128 node(s) x 8 GPUs = 1024 GPUs
# plan: tp=2,pp=8,cp=1,ep=64,vp=4,sp=true,zero=1,mbs=1,recompute=selective,precision=fp8,offload=none,etp=1
# layout: TP2 PP8x4 EP64 ETP1 DP64 (world size 1024 = tp 2 x pp 8 x cp 1 x dp 64; experts: etp 1 x ep 64 x expert-dp 2 over the same ranks (MoE parallel folding))
# batch: global 8192 sequences of 4096 tokens = micro-batch 1 x 128 micro-batches x dp 64
# predicted: step 21.980 s, 58.6 GiB per GPU, MFU 19.6%, 1,491 tokens/s/GPU (autotune's analytic cost model)
# TRAINING_ARGS are placeholders (run length, learning rate, logging): set your own.
# Without --data-path, Megatron trains on mock data with a NullTokenizer of the model's vocabulary.
# deepseek-v3 scales RoPE with yarn (its config.json's rope_scaling): Megatron's multi-latent attention uses yarn, but its factors (--rotary-scaling-factor and the yarn betas and mscale) are not set here; take them from that config to train at its context length.
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
    --num-layers 61
    --hidden-size 7168
    --ffn-hidden-size 18432
    --num-attention-heads 128
    --multi-latent-attention
    --q-lora-rank 1536
    --kv-lora-rank 512
    --qk-head-dim 128
    --qk-pos-emb-head-dim 64
    --v-head-dim 128
    --seq-length 4096
    --max-position-embeddings 163840
    --position-embedding-type rope
    --rotary-base 10000
    --swiglu
    --disable-bias-linear
    --untie-embeddings-and-output-weights
    --normalization RMSNorm
    --attention-dropout 0.0
    --hidden-dropout 0.0
    --num-experts 256
    --moe-router-topk 8
    --moe-ffn-hidden-size 2048
    --moe-layer-freq '[0,0,0,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1]'
    --moe-shared-expert-intermediate-size 2048
    --moe-router-num-groups 8
    --moe-router-group-topk 4
    --moe-router-score-function sigmoid
    --moe-router-enable-expert-bias
    --moe-router-bias-update-rate 1e-3
    --moe-router-load-balancing-type seq_aux_loss
    --moe-aux-loss-coeff 1e-4
    --moe-router-topk-scaling-factor 2.5
    --moe-grouped-gemm
    --mtp-num-layers 1
)
PARALLEL_ARGS=(
    --tensor-model-parallel-size 2
    --pipeline-model-parallel-size 8
    --pipeline-model-parallel-layout 'Ett|tt|tt|tt|tt|tt|tt|tt|tt|tt|tt|tt|tt|tt|tt|t|tt|tt|tt|tt|tt|tt|tt|t|tt|tt|tt|tt|tt|tt|tt|tmL'
    --context-parallel-size 1
    --expert-model-parallel-size 64
    --expert-tensor-parallel-size 1
    --sequence-parallel
    --tp-comm-overlap
    --use-distributed-optimizer
    --overlap-grad-reduce
    --overlap-param-gather
    --moe-token-dispatcher-type flex
    --moe-flex-dispatcher-backend deepep
    --overlap-moe-expert-parallel-comm
)
RECOMPUTE_ARGS=(
    --recompute-granularity selective
    --recompute-modules mla_up_proj layernorm
)
PRECISION_ARGS=(
    --bf16
    --fp8-format e4m3
    --fp8-recipe blockwise
    --fp8-param-gather
)
BATCH_ARGS=(
    --micro-batch-size 1
    --global-batch-size 8192
)
DATA_ARGS=(
    --mock-data
    --tokenizer-type NullTokenizer
    --vocab-size 129280
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
