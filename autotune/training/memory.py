"""Memory per GPU: model states (weights, gradients, optimizer) and activations.

Model states, mixed precision with Adam (Rajbhandari et al. 2020, ZeRO): bf16
weights (2 bytes/param), fp32 gradients (4: Megatron and FSDP accumulate and
reduce gradients in fp32 by default), fp32 master weights and two moments (12).
ZeRO stage 1 shards the 12 over data parallelism, stage 2 also the gradients,
stage 3 also the weights.  (The ZeRO paper counts 2-byte gradients; pass
``grad_bytes=2`` to reproduce its figures.)  fp16 plans keep 2-byte gradients where the framework
keeps fp16 gradients in fp16 (``Framework.fp16_grads_in_fp16``: Megatron upcasts only bf16's), and a
16-bit gradient buffer beside an fp32 master copy is upcast at the optimizer step, whose peak counts
where it exceeds the backward's.

Activations per layer and micro-batch follow Korthikanti et al. 2022 (Table 2),
derived term by term rather than from the constant 34 so that GQA, head_dim,
SwiGLU and MoE come out right.  With GPT's shapes (a*d = h, g = a, f = 4h,
GeLU, dropout) the terms add up to the paper's ``s*b*h*(34 + 5*a*s/h)``:

* kept whole on every TP rank unless sequence parallelism splits them: the two
  norm inputs (4sbh), the QKV and MLP inputs (2sbh each) and two dropout masks
  (sbh each, only when the model trains with dropout) -> 10sbh;
* split by TP: Q, K, V and the attention output (2 bytes each: 8sbh for MHA)
  and the MLP's intermediate tensors (4sbf for GeLU, 6sbf for SwiGLU) -> 24sbh;
* the attention score matrices ``5*a*s^2*b``: only when stored, i.e. with unfused
  attention (Megatron-LM before FlashAttention) and no selective recomputation.
  Flash attention never stores them.

What ``selective`` keeps is the framework's (``Framework.selective_recompute``):
Megatron's attention-core recompute drops the stored scores of unfused attention and
saves nothing under flash attention (the kernel never stores scores); PyTorch's op-level
selective checkpointing (torchtitan) keeps the layer input, the attention output and
every second matmul output (:func:`op_selective_bytes_per_layer`).  fp8 plans keep the
fp8 copies of the GEMM inputs (1 byte).  Besides, per framework: the logits and loss
buffer (``logits_bytes`` per logit), how the weights and master copy are held
(``master_weights``: FSDP's fp32 shard *is* the master copy), the gather buffers of
ZeRO-3 and the unsharded gradient accumulation of FSDP's ZeRO-2 (none when the shard
group has one rank), ``workspace_gib`` and the allocator's overhead on everything
allocated during the step (activations, logits and those buffers).  fp8 plans also keep
the framework's persistent fp8 weight copies beyond the bf16 weights
(``fp8_weight_cache_bytes`` per local GEMM weight: TransformerEngine's cached fp8 weight and
its transpose under Megatron-LM's bf16 parameters; none where the parameters are fp8
themselves or nothing is cached), counted with the weights.
"""

from __future__ import annotations

import numpy as np

from ..costmodel.kernels import NVFP4_BYTES, gemm_operand_bytes
from ..inputs.framework import Framework
from ..inputs.modelspec import ModelSpec

# TransformerEngine's cached NVFP4 weight (Megatron-Core passes is_first_microbatch, so TE quantizes each GEMM weight
# on a step's first micro-batch and keeps it): a row-wise copy for the forward and a column-wise one for the input
# gradient (NVFP4Quantizer with both usages), each NVFP4_BYTES a value (E2M1 data and its E4M3 block scales; the
# 16x16 weight scales are stored in the GEMM's 1x16 layout)
NVFP4_WEIGHT_CACHE_BYTES = 2.0 * NVFP4_BYTES

GIB = float(2**30)
WEIGHT_BYTES = 2.0  # bf16 weights
GRAD_BYTES = 4.0  # fp32 gradients
OPTIMIZER_BYTES = 12.0  # fp32 master weights + Adam moments
# Logits and loss, per logit element at the peak of the loss backward, for PyTorch's
# cross_entropy on upcast logits (torchtitan): during log_softmax's backward, the fp32
# log-probabilities it kept (4), the fp32 gradient flowing in (4) and the one it writes (4).
# Each framework states its own figure (`logits_bytes`); this is the reference value.
LOGITS_BYTES = 12.0
# ZeRO-2 with several micro-batches accumulates the unsharded gradients in the reduction's
# precision: FSDP2 with torchtitan's default reduce dtype (fp32) upcasts each bf16 gradient into
# an fp32 accumulation buffer when gradient sync is off (FSDPParam.to_accumulated_grad_if_needed).
ACCUMULATED_GRAD_BYTES = 4.0
# torch.distributed.pipelining (torchtitan 2024): the last stage keeps the output of every
# micro-batch (PipelineStage.output_chunks, merged and returned at the end of the step); the
# model's output is the fp32 logits (torchtitan casts them with .float()).  Every stage also
# pre-allocates a receive buffer per micro-batch for the activations it receives and for the
# gradients it receives, each the size of the stage boundary tensor.
PIPELINE_OUTPUT_BYTES = 4.0


def model_state_bytes(
    params: np.ndarray,
    shard: np.ndarray,
    zero: np.ndarray,
    offload: np.ndarray | bool = False,
    *,
    weight_bytes: float = WEIGHT_BYTES,
    grad_bytes: float = GRAD_BYTES,
    optimizer_bytes: float = OPTIMIZER_BYTES,
    master_weights: str = "separate",
) -> dict[str, np.ndarray]:
    """Weights, gradients and optimizer state on one GPU holding ``params`` (before DP sharding).

    ``shard`` is the size of the group that ZeRO shards over (dp*cp); optimizer
    offload moves the optimizer state to host memory.  ``master_weights``:
    ``separate`` -- 16-bit weights plus an fp32 master copy inside the optimizer state
    (Megatron, DeepSpeed); ``sharded_param`` -- PyTorch FSDP keeps the parameter itself
    in fp32 (sharded from ZeRO-1 on) and it is the master copy, so the optimizer holds
    only the two moments, and the 16-bit copy exists whole only for ZeRO-2 (parameters
    stay gathered between forward and backward: reshard_after_forward=False) -- for
    ZeRO-3 it lives in the per-unit gather buffers.
    """
    params = np.asarray(params, dtype=np.float64)
    shard = np.asarray(shard, dtype=np.float64)
    zero = np.asarray(zero)
    grads = grad_bytes * params / np.where(zero >= 2, shard, 1.0)
    if master_weights == "sharded_param":
        master = (WEIGHT_BYTES + 2.0) * params / np.where(zero >= 1, shard, 1.0)  # the fp32 parameter
        weights = master + np.where(zero == 2, weight_bytes * params, 0.0)
        optimizer = (optimizer_bytes - 4.0) * params / np.where(zero >= 1, shard, 1.0)  # the moments
    else:
        weights = weight_bytes * params / np.where(zero >= 3, shard, 1.0)
        optimizer = optimizer_bytes * params / np.where(zero >= 1, shard, 1.0)
    optimizer = np.where(np.asarray(offload, dtype=bool), 0.0, optimizer)
    return {"weights": weights, "gradients": grads, "optimizer": optimizer}


def fp8_weight_cache_bytes(model: ModelSpec, geo, stage_layers: np.ndarray, bytes_per_param: float) -> np.ndarray:
    """Bytes of the fp8 weight copies a framework keeps beside its bf16 weights for one stage's ``stage_layers`` blocks.

    TransformerEngine under Megatron-Core (``is_first_microbatch`` passed, ``disable_parameter_transpose_cache``
    False by default) casts every GEMM weight to fp8 on a step's first micro-batch and keeps the row-wise copy
    and the column-wise (transposed) one for the other micro-batches and the backward: ``bytes_per_param``
    (the framework's ``fp8_weight_cache_bytes``, 1 + 1) per local GEMM weight -- the blocks' attention and MLP
    projections and routed experts after TP and EP.  The norms and the MoE router are no TE fp8 GEMMs, nor are
    the embedding and the output layer (Megatron-Core builds them outside TE and runs them in bf16), so they
    keep no copy.  DualPipe's second stage copy is cached as well.
    """
    copies = np.where(geo.dualpipe, 2.0, 1.0)
    h = float(model.hidden_size)
    router = geo.moe_fraction * h * (model.moe.n_experts if model.moe else 0)
    not_gemm = (model.norm_params_per_layer + router) / geo.tp
    gemm_params = geo.dense_params_per_layer - not_gemm + geo.expert_params_per_layer
    return bytes_per_param * copies * stage_layers * gemm_params


def activation_bytes_per_layer(
    model: ModelSpec,
    tokens: np.ndarray,
    seq_len: np.ndarray,
    tp: np.ndarray,
    sp: np.ndarray,
    moe_layer: bool,
    *,
    attention_scores_stored: bool = False,
    tp_microbatch_heads: np.ndarray | None = None,
    fp8: np.ndarray | bool = False,
    kind: str = "full",
    fp4: np.ndarray | bool = False,
    etp: np.ndarray | None = None,
    moe_imbalance: float = 1.0,
    recompute_up_proj: np.ndarray | bool = False,
) -> np.ndarray:
    """Bytes of activations one layer keeps for backward, for one micro-batch of ``tokens`` tokens.

    ``tokens`` = micro-batch * sequence / CP on this GPU; ``seq_len`` is the key
    length attention scores would span (only used when ``attention_scores_stored``).
    With ``fp8`` (TransformerEngine, torchao Float8) the inputs of the fp8 GEMMs are kept
    in their fp8 form for the weight gradient: 1 byte instead of 2 (the QKV and MLP
    inputs, the attention output and the MLP activation output); with ``fp4`` (NVFP4) in their NVFP4 form,
    0.5625 bytes (kernels.NVFP4_BYTES: an E2M1 value and its share of the 16-value block's E4M3 scale).

    Attention by ``kind``: GQA keeps Q, K, V and the core output; multi-head latent attention keeps
    the two latents before and after their norms and the RoPE key (replicated on the TP ranks, as the
    down-projections are), the expanded per-head Q, K and V unless the up-projections are recomputed
    (``recompute_up_proj``: Megatron-Core recompute_modules mla_up_proj, DeepSeek-V3 §3.2.3), the
    core output and the fp32 log-sum-exp per head (with the up-projections, the norms are recomputed:
    neither the layer's normed inputs nor the normed latents are kept); Gated DeltaNet keeps its
    projections' outputs.
    Routed experts (MoE parallel folding): this rank's experts see ``k * tokens * etp / tp`` token
    copies (``moe_imbalance`` times that on the busiest rank), each keeping its permuted input (the
    up-projection's input), the up-projection output(s) (``f/etp`` wide), the activation output
    (the down-projection's input) and the expert output the combine weighs by the router's
    probability (needed for their gradient); the router keeps fp32 logits and probabilities.
    """
    h = float(model.hidden_size)
    tokens = np.asarray(tokens, dtype=np.float64)
    tp = np.asarray(tp, dtype=np.float64)
    etp = tp if etp is None else np.asarray(etp, dtype=np.float64)
    sp_div = np.where(np.asarray(sp, dtype=bool), tp, 1.0)
    gemm_input = gemm_operand_bytes(fp8, fp4)
    up_proj = np.asarray(recompute_up_proj, dtype=bool)
    # Two norm inputs (2 bytes each), the QKV and MLP inputs (the norms' outputs: recomputed with the
    # norms where the MLA up-projections are, DeepSeek-V3 §3.2.3), two dropout masks.
    normed = np.where(up_proj, 0.0, 2.0 * gemm_input)
    replicated = (4.0 + normed + (2.0 if model.dropout else 0.0)) * tokens * h
    latents = np.zeros_like(tokens)
    if kind == "linear":
        la = model.linear_attention
        # The in-projections' outputs (q, k, v through the conv, z, a, b), the gated norm's output
        # (the out-projection's input) and the recurrent chunk states are of that order.
        attention = tokens * (2.0 * (la.conv_channels * 2 + la.value_width + 2 * la.n_value_heads)
                              + gemm_input * la.value_width)
    elif model.mla is not None:
        mla = model.mla
        a = float(model.n_heads)
        q_latent = float(mla.q_lora_rank or 0)
        # The latents before their norms, and after them (the up-projections' inputs) unless recomputed.
        latent_bytes = np.where(up_proj, 2.0, 2.0 + gemm_input)
        latents = tokens * (latent_bytes * (q_latent + mla.kv_lora_rank) + 2.0 * mla.qk_rope_head_dim)
        expanded = 2.0 * a * (2.0 * mla.qk_head_dim + mla.v_head_dim)  # Q, K, V per head
        keep_expanded = np.where(up_proj, 0.0, expanded)
        attention = tokens * (keep_expanded + gemm_input * a * mla.v_head_dim + 4.0 * a)
    else:
        # Q, K, V (2 bytes each) and the attention output (the projection's input).
        attention = tokens * (2.0 * (model.q_width + 2 * model.kv_width) + gemm_input * model.q_width)
    # MLP: the up projection's output(s) (2 bytes each) and the activation output (the down
    # projection's input): 4f bytes for GeLU, 6f for SwiGLU in bf16.
    mlp_per_width = (2.0 if model.mlp == "gelu" else 4.0) + gemm_input
    experts = np.zeros_like(tokens)
    if moe_layer and model.moe:
        moe = model.moe
        copies = moe.top_k * tokens * etp / tp * moe_imbalance
        experts = copies * (gemm_input * h + mlp_per_width * moe.expert_ffn_hidden_size / etp)
        router = 8.0 * moe.n_experts * tokens / sp_div
        mlp = mlp_per_width * tokens * moe.shared_expert_ffn_hidden_size
        experts = experts + router
    else:
        mlp = mlp_per_width * tokens * model.ffn_hidden_size
    split = attention + mlp
    if attention_scores_stored:
        # softmax output (2), dropout mask (1), dropout output (2) per score: 5*a*s*s*b.
        split = split + 5.0 * model.n_heads * tokens * np.asarray(seq_len, dtype=np.float64)
    return replicated / sp_div + split / tp + latents + experts


def op_selective_bytes_per_layer(model: ModelSpec, tokens: np.ndarray, tp: np.ndarray, sp: np.ndarray,
                                 moe_layer: bool) -> np.ndarray:
    """Bytes one layer keeps under PyTorch's op-level selective checkpointing (flash attention).

    torchtitan's policy (``_save_list`` in its parallelize_llama.py) keeps the layer input,
    the attention kernel's output and every second matmul output, and recomputes the rest:
    we count the input, the attention output and half of the weight GEMMs' outputs.
    """
    h = float(model.hidden_size)
    tokens = np.asarray(tokens, dtype=np.float64)
    tp = np.asarray(tp, dtype=np.float64)
    sp_div = np.where(np.asarray(sp, dtype=bool), tp, 1.0)
    if moe_layer and model.moe:
        moe = model.moe
        ffn_out = moe.top_k * (model.mlp_matrices - 1) * moe.expert_ffn_hidden_size
        ffn_out += (model.mlp_matrices - 1) * moe.shared_expert_ffn_hidden_size
    else:
        ffn_out = (model.mlp_matrices - 1) * model.ffn_hidden_size
    matmul_outputs = (model.q_width + 2 * model.kv_width) + h + ffn_out + h
    return 2.0 * tokens * h / sp_div + 2.0 * tokens * (model.q_width + 0.5 * matmul_outputs) / tp


def korthikanti_activation_bytes(s: float, b: float, h: float, a: float, t: float, sp: bool, recompute: str) -> float:
    """Korthikanti et al. 2022, Table 2: activation bytes per layer for a GPT layer (reference formula)."""
    if recompute == "full":
        return 2.0 * s * b * h / (t if sp else 1.0)
    attention_scores = 0.0 if recompute == "selective" else 5.0 * a * s / h
    if t == 1:
        return s * b * h * (34.0 + attention_scores)
    if sp:
        return s * b * h / t * (34.0 + attention_scores)
    return s * b * h * (10.0 + 24.0 / t + attention_scores / t)


MEMORY_PARTS = ("weights", "gradients", "optimizer", "activations", "logits", "zero3_buffers", "workspace")


def memory_parts(model: ModelSpec, geo, workload, plans, framework: Framework) -> dict[str, np.ndarray]:
    """Peak bytes per GPU by part, on the fuller of the first and last pipeline stages.

    The first stage holds the most micro-batches in flight under 1F1B (``min(m, p)``,
    times ``1 + (p-1)/(p*v)`` when interleaved, Korthikanti et al. 2022 §4.2.3) and the
    input embedding; the last stage holds one micro-batch, the output layer and the logits.
    The framework's ``pipeline_runtime``: ``megatron`` (Megatron-LM, NeMo, DeepSpeed: a
    micro-batch's output and buffers are freed after its backward) or ``torch``
    (torch.distributed.pipelining as torchtitan used it in 2024: the last stage keeps every
    micro-batch's fp32 logits until the step ends, and each stage pre-allocates receive
    buffers for every micro-batch; ``PIPELINE_OUTPUT_BYTES``).
    """
    from .step_time import (  # local import: step_time imports nothing from here
        FP4,
        FP8,
        FP16,
        FULL,
        SELECTIVE,
        layer_mix,
    )

    fw = framework
    recompute_full = np.asarray(plans.recompute) == FULL
    zero = np.asarray(plans.zero)
    offload = np.asarray(plans.offload) == 1
    layers = geo.layers_per_stage
    unfused = fw.attention == "unfused"

    fp8 = np.asarray(plans.precision) == FP8
    fp4 = np.asarray(plans.precision) == FP4
    selective = np.asarray(plans.recompute) == SELECTIVE

    # Megatron-style selective recompute on an MLA model recomputes the up-projections (step_time.py).
    up_proj = selective & (fw.selective_recompute == "core_attention") & (model.mla is not None)
    folded = dict(etp=geo.etp, moe_imbalance=workload.moe_expert_load(geo.ep), recompute_up_proj=up_proj)

    def per_layer(moe_layer: bool, kind: str) -> np.ndarray:
        plain = activation_bytes_per_layer(model, geo.tokens, workload.seq_len, geo.tp, geo.sp, moe_layer, fp8=fp8,
                                           fp4=fp4, kind=kind, **folded)
        if fw.selective_recompute == "op_sac":
            sac = op_selective_bytes_per_layer(model, geo.tokens, geo.tp, geo.sp, moe_layer)
            plain = np.where(selective, sac, plain)
        if not unfused or kind != "full" or model.mla is not None:
            return plain  # flash attention never stores the scores; core-attention recompute saves nothing more
        # Unfused attention stores the score matrices unless the attention core is recomputed.
        stored = activation_bytes_per_layer(model, geo.tokens, workload.seq_len, geo.tp, geo.sp, moe_layer,
                                            attention_scores_stored=True, fp8=fp8, fp4=fp4, kind=kind,
                                            **folded)
        drops_scores = selective & (fw.selective_recompute == "core_attention")
        return np.where(drops_scores, plain, stored)

    full_layer = sum(share * per_layer(moe, kind) for share, kind, moe in layer_mix(model))
    layer_input = 2.0 * geo.tokens * model.hidden_size / np.where(geo.sp, geo.tp, 1.0)
    # Full recomputation keeps each layer's input, and one layer's activations while it is recomputed.
    kept_per_layer = np.where(recompute_full, layer_input, full_layer)
    working_set = np.where(recompute_full, full_layer, 0.0)

    p, m, v = geo.pp, geo.microbatches, geo.vp
    in_flight = np.minimum(m, p) * np.where(v > 1, 1.0 + (p - 1.0) / (p * v), 1.0)
    # DualPipe holds PP + 1 micro-batches' activations of a stage (deepseek-ai/DualPipe README table).
    in_flight = np.where(geo.dualpipe, np.minimum(m, p) + 1.0, in_flight)
    last_layers = geo.last_layers(fw)
    first_acts = layers * kept_per_layer * in_flight + working_set
    last_acts = last_layers * kept_per_layer + working_set
    # The loss's logits, and one more set per MTP module (its own pass through the shared head).
    logits = (1.0 + model.mtp_layers) * fw.logits_bytes * geo.tokens * model.vocab_size / geo.tp
    torch_pipeline = (fw.pipeline_runtime == "torch") & (p > 1)
    # Outputs kept for the whole step (the current micro-batch's included) on the last stage.
    kept_outputs = np.where(torch_pipeline, PIPELINE_OUTPUT_BYTES * m * geo.tokens * model.vocab_size / geo.tp, 0.0)
    # Receive buffers, one per micro-batch and direction at each of the rank's v stage boundaries
    # (the first rank receives no activations, the last no gradients, for their outer stage).
    boundary = 2.0 * geo.tokens * model.hidden_size / np.where(geo.sp, geo.tp, 1.0)
    recv_buffers = np.where(torch_pipeline, (2.0 * v - 1.0) * m * boundary, 0.0)
    first_acts = first_acts + recv_buffers
    last_acts = last_acts + recv_buffers
    last_logits = logits + kept_outputs

    single_stage = p == 1
    # DualPipe keeps two stages on every rank (stage i and stage p-1-i): twice their weights and
    # gradients; the optimizer state of the two copies is sharded over both (2x the ZeRO group).
    copies = np.where(geo.dualpipe, 2.0, 1.0)

    # The gradient buffer: grad_bytes, or 2 for fp16 plans where only bf16 gets fp32 gradients (fp16_grads_in_fp16).
    grad_bytes = fw.grad_bytes_of(np.asarray(plans.precision) == FP16)

    def states(stage_layers, extra_params):
        kw = {"grad_bytes": grad_bytes, "master_weights": fw.master_weights}
        shard = np.where(zero >= 1, copies, 1.0)
        dense = model_state_bytes(copies * (stage_layers * geo.dense_params_per_layer + extra_params),
                                  geo.dense_shard * shard, zero, offload, **kw)
        expert = model_state_bytes(copies * stage_layers * geo.expert_params_per_layer, geo.expert_shard * shard,
                                   zero, offload, **kw)
        out = {k: dense[k] + expert[k] for k in dense}
        return out

    dense_layers = layers * geo.dense_params_per_layer
    expert_layers = layers * geo.expert_params_per_layer
    first = states(layers, geo.embedding_params + np.where(single_stage, geo.output_params, 0.0))
    last = states(last_layers, geo.output_params + np.where(single_stage, geo.embedding_params, 0.0))
    frag = 1.0 + fw.allocator_overhead
    # Over a single rank nothing is sharded (FSDP falls back to NO_SHARD, a distributed
    # optimizer over one rank is DDP), so neither buffer exists.
    sharded_dense = geo.dense_shard > 1
    sharded_expert = geo.expert_shard > 1
    # FSDP's ZeRO-2 with several micro-batches accumulates the unsharded gradients (in fp32,
    # ACCUMULATED_GRAD_BYTES) until the step's reduce-scatter (FSDP2 under torch.distributed.pipelining,
    # FSDP no_sync); DeepSpeed-style ZeRO-2 reduces every micro-batch into the shard instead.
    # FSDP2 as torchtitan drives it (`fsdp2_sync_unless_pp`) accumulates only under torch.distributed.pipelining,
    # which turns gradient sync off until the last backward (PipelineStage.backward_maybe_with_nosync:
    # set_requires_gradient_sync(False)); without PP torchtitan's Trainer.train_step calls loss.backward()
    # per micro-batch with sync on, so each is reduce-scattered into the fp32 shard (step_time.py).
    pipelined_fsdp2 = (fw.zero2 == "fsdp2_sync_unless_pp") & (geo.pp > 1)
    accumulate = (zero == 2) & (geo.microbatches > 1) & ((fw.zero2 == "accumulate_unsharded") | pipelined_fsdp2)
    for st, extra in ((first, geo.embedding_params), (last, geo.output_params)):
        unsharded = ACCUMULATED_GRAD_BYTES * (np.where(sharded_dense, dense_layers + extra, 0.0) + np.where(sharded_expert, expert_layers, 0.0))
        # The fp32 accumulation buffer holds the gradients until the step's reduce-scatter, whose
        # sharded output replaces it unit by unit: it stands in for the sharded gradients (a
        # persistent per-parameter allocation like them, so no allocator overhead).
        st["gradients"] = np.where(accumulate & (unsharded > 0), unsharded, st["gradients"])
    # fp8 weight copies kept between GEMMs (TransformerEngine's cache, `fp8_weight_cache_bytes`): persistent,
    # allocated once, so counted with the weights and without allocator overhead.  Not under ZeRO-3: the
    # sharded frameworks drop a unit's fp8 copies with its gathered weights and rebuild them when next
    # needed (TransformerEngine PR #1648, 2025-04: 'In FSDP, we may delete the FP8 transpose cache and then
    # regenerate it in backward'), so only the current units' copies exist, within the gather buffers' margin.
    if fw.fp8_weight_cache_bytes > 0.0:
        # with fp8 parameters (fp8_param_gather, the distributed optimizer's: ZeRO-1, where the launch files pass
        # --fp8-param-gather) the copies replace the bf16 weights; ZeRO-2 (Megatron-FSDP optim_grads) keeps bf16
        # parameters beside them
        cached = fp8 & (zero < 3) & ~((zero == 1) & fw.fp8_param_gather)
        first["weights"] = first["weights"] + np.where(
            cached, fp8_weight_cache_bytes(model, geo, layers, fw.fp8_weight_cache_bytes), 0.0)
        last["weights"] = last["weights"] + np.where(
            cached, fp8_weight_cache_bytes(model, geo, last_layers, fw.fp8_weight_cache_bytes), 0.0)
    if fw.supports_fp4():
        # NVFP4 plans keep bf16 parameters in every framework that trains in NVFP4 (the launch files pass no
        # --fp4-param-gather; Megatron-Bridge's bf16_with_nvfp4_mixed sets neither fp8_param_gather nor fp4_param),
        # so TE's cached NVFP4 copies (row-wise and column-wise, NVFP4_WEIGHT_CACHE_BYTES) sit beside them at any
        # ZeRO stage below 3 -- whatever fp8_weight_cache_bytes says, which prices the fp8 recipes' parameters
        cached = fp4 & (zero < 3)
        first["weights"] = first["weights"] + np.where(
            cached, fp8_weight_cache_bytes(model, geo, layers, NVFP4_WEIGHT_CACHE_BYTES), 0.0)
        last["weights"] = last["weights"] + np.where(
            cached, fp8_weight_cache_bytes(model, geo, last_layers, NVFP4_WEIGHT_CACHE_BYTES), 0.0)
    # A 16-bit gradient buffer beside an fp32 master copy: the optimizer step upcasts the gradients of its shard into
    # fp32 (Megatron's _copy_model_grads_to_main_grads: main_param.grad = main_grad.float(), a copy where main_grad
    # is fp16 or bf16 and the same tensor where it is fp32), 4 bytes per parameter it updates, freed by the next
    # iteration's zero_grad(set_to_none=True) before any forward.  Activations and logits are gone by the step, so
    # the step's peak is the states plus that copy and the backward's is the states plus activations: the larger
    # counts, and the copy shows as gradients only by what it exceeds the activations by.  docs/distrib_optimizer.md
    # counts it: fp16 parameters and gradients take 20 bytes per parameter (4 + 16/d distributed), bf16 with fp32
    # gradients 18 (6 + 12/d).  The offloaded optimizer upcasts on the host.
    if fw.master_weights == "separate":
        copy_share = np.where(np.asarray(grad_bytes) < 4.0, 4.0 / OPTIMIZER_BYTES, 0.0)
        for st, transient in ((first, frag * first_acts + np.where(single_stage, frag * logits, 0.0)),
                              (last, frag * (last_acts + last_logits))):
            st["gradients"] = st["gradients"] + np.maximum(copy_share * st["optimizer"] - transient, 0.0)
    # ZeRO-3 materialises the current and the prefetched unit's full bf16 weights and
    # gradients: two layers, or the embedding / output layer if that is larger.
    unit = np.maximum(2.0 * (np.where(sharded_dense, geo.dense_params_per_layer, 0.0)
                             + np.where(sharded_expert, geo.expert_params_per_layer, 0.0)),
                      np.where(sharded_dense, np.maximum(geo.embedding_params, geo.output_params), 0.0))
    zero3_buffers = np.where(zero >= 3, frag * 4.0 * unit, 0.0)
    first_total = sum(first.values()) + frag * first_acts + np.where(single_stage, frag * logits, 0.0)
    last_total = sum(last.values()) + frag * (last_acts + last_logits)
    use_first = first_total >= last_total
    pick = lambda a, b: np.where(use_first, a, b)  # noqa: E731
    return {
        "weights": pick(first["weights"], last["weights"]),
        "gradients": pick(first["gradients"], last["gradients"]),
        "optimizer": pick(first["optimizer"], last["optimizer"]),
        "activations": frag * pick(first_acts, last_acts),
        "logits": frag * pick(np.where(single_stage, logits, 0.0), last_logits),
        "zero3_buffers": zero3_buffers,
        "workspace": np.full_like(first_total, fw.workspace_gib * GIB),
    }
