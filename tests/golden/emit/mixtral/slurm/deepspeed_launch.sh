#!/usr/bin/env bash
# Written by autotune for DeepSpeed 0.19.8. Edit freely; rerun `autotune emit` to regenerate.
# model: mixtral-8x7b; hardware: h100-sxm5-80gb; 8 node(s) x 8 GPUs = 64 GPUs
# plan: tp=1,pp=1,cp=1,ep=8,vp=1,sp=false,zero=1,mbs=1,recompute=full,precision=bf16,offload=none
# layout: EP8 DP64 (world size 64 = tp 1 x pp 1 x cp 1 x dp 64; ep 8 nests inside dp x cp)
# batch: global 512 sequences of 4096 tokens = micro-batch 1 x 8 micro-batches x dp 64
# predicted: step 5.892 s, 53.6 GiB per GPU, MFU 44.8%, 5,561 tokens/s/GPU (autotune's analytic cost model)
# The training script is yours: it calls deepspeed.initialize(args=args, model=model, ...) after
# deepspeed.add_config_arguments(parser), which reads --deepspeed and --deepspeed_config.
# Full recompute: checkpoint every layer (deepspeed.checkpointing.checkpoint, or model.gradient_checkpointing_enable() for a Hugging Face model).
# overlap_comm is false, DeepSpeed's default for ZeRO stages 1 and 2 and what the estimate prices (gradients reduced after the backward); true overlaps the reduction with the backward, for bucket memory the estimate does not count.
# AutoTP/AutoEP shard a Hugging Face model at deepspeed.initialize (tensor_parallel.autotp_size, expert_parallel.autoep_size).
# RoPE (theta 1000000) is the model code's: ds_config.json has no model section, so the script's model (a Hugging Face model: its config.json's rope_theta and rope_scaling) must carry it.
# Router: AutoEP's expert_parallel section states top-2 softmax routing; AutoEP runs it dropless (no capacity factor).
# Load balancing: the model's own auxiliary loss (a Hugging Face model's router_aux_loss_coef, with output_router_logits true); DeepSpeed's config sets no coefficient.
#
# Run once, on the first node: the deepspeed launcher starts 8 processes on each of the
# 8 node(s) listed in HOSTFILE (lines 'hostname slots=8').
set -euo pipefail

HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
if [[ -z "${HOSTFILE:-}" ]]; then HOSTFILE="${HERE}/hostfile"; fi
if [[ -z "${MASTER_ADDR:-}" ]]; then MASTER_ADDR="$(hostname)"; fi
if [[ -z "${MASTER_PORT:-}" ]]; then MASTER_PORT=29500; fi

# Your DeepSpeed training script.
if [[ -z "${TRAIN_SCRIPT:-}" ]]; then TRAIN_SCRIPT=train.py; fi

DEEPSPEED_ARGS=(
    --deepspeed
    --deepspeed_config "${HERE}/ds_config.json"
)

deepspeed \
    --hostfile "${HOSTFILE}" \
    --num_nodes 8 \
    --num_gpus 8 \
    --master_addr "${MASTER_ADDR}" \
    --master_port "${MASTER_PORT}" \
    "${TRAIN_SCRIPT}" \
    "${DEEPSPEED_ARGS[@]}" \
    "$@"
