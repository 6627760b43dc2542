"""Step time of a training plan and its parts (docs/cost-model.md).

One micro-batch on one pipeline stage costs the forward and backward of its
layers (GEMMs, flash attention, memory-bound ops), recomputation, and the
*exposed* part of its TP / CP / EP communication and ZeRO-3 gathers.  A step
of a 1F1B pipeline with ``m`` micro-batches takes ``m`` times the slowest stage
plus the other stages' single passes divided by the interleaving ``vp``
(bubble ``(p-1)/(v*m)``, Narayanan et al. 2021); the last stage, which also
computes the logits and loss, is the slowest, so its extra work counts ``m``
times, as it does on real pipelines.  Then the data-parallel gradient reduction
that backward could not hide, the optimizer step, and a fixed per-step overhead.

Kernel times (GEMM pipeline fill, flash attention's softmax cost, fp8 casts) are in
kernels.py; collective times (ring latency of all-gather/reduce-scatter) in comm.py.
FSDP / ZeRO-3 collectives are issued per layer; ZeRO-2 reduce-scatters once per step
(gradients accumulate unsharded, as FSDP2 under torch.distributed.pipelining does);
pipeline sends carry 1/tp of the activation (Megatron's scatter/gather).  docs/accuracy.md
records what each of these changed against measured runs.
"""

from __future__ import annotations

import numpy as np

from ..costmodel import comm
from ..costmodel.kernels import Kernels
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from .geometry import Geometry
from .plan import PRECISION, RECOMPUTE, PlanBatch

FULL = RECOMPUTE.index("full")
SELECTIVE = RECOMPUTE.index("selective")
FP8 = PRECISION.index("fp8")
OPTIMIZER_BYTES_PER_PARAM = 30.0  # Adam step: read/write fp32 master, m, v (24), read fp32 grad (4), write bf16 weight (2)
HOST_BYTES_PER_PARAM = 6.0  # offload: fp32 gradient down, bf16 weight back up

TIME_PARTS = (
    "compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "pp_comm", "pipeline_bubble",
    "dp_comm", "optimizer", "offload", "overhead",
)


# Granularity of ZeRO-3 / FSDP parameter collectives (a property of the software, like the
# attention kernel): "block" -- one flat all-gather / reduce-scatter per transformer block
# (PyTorch FSDP, FSDP2); "submodule" -- one per submodule (linear or norm), with per-rank chunks
# too small to spread over a node's NICs (DeepSpeed ZeRO-3 as of 2021, Narayanan et al. 2021
# Table 2).
BLOCK_GRANULAR = "block"
SUBMODULE_GRANULAR = "submodule"
ZERO3_COLLECTIVES = (BLOCK_GRANULAR, SUBMODULE_GRANULAR)


def zero3_submodules_per_layer(model: ModelSpec) -> float:
    """Submodules of one layer that DeepSpeed's 2021 ZeRO-3 fetched one at a time.

    The two norms, the fused QKV and attention-output linears, and each MLP matrix.
    """
    return 2.0 + 2.0 + model.mlp_matrices


class _Layer:
    """Forward, backward and communication times of one layer for one micro-batch (arrays)."""

    def __init__(self, model: ModelSpec, geo: Geometry, kernels: Kernels, cluster: Cluster, seq_len: int, moe_layer: bool,
                 unfused_attention: bool = False):
        h = float(model.hidden_size)
        t, T = geo.tp, geo.tokens
        lin = kernels.linear_s
        # Weight GEMMs (linear layers): forward, and backward (dgrad + wgrad), in the plan's precision.
        fwd_parts, bwd_parts = [], []

        def linear(m, n, k, count=1.0):
            f, b = lin(m, n, k, count)
            fwd_parts.append(f)
            bwd_parts.append(b)

        linear(T, (model.q_width + 2 * model.kv_width) / t, h)
        linear(T, h, model.q_width / t)
        width_in = (model.mlp_matrices - 1.0)  # gate+up fused for SwiGLU
        elementwise_mlp = (4.0 if model.mlp == "gelu" else 6.0)
        if moe_layer and model.moe:
            moe = model.moe
            local_experts = moe.n_experts / geo.ep
            tokens_per_expert = T * moe.top_k / local_experts
            fe = moe.expert_ffn_hidden_size
            linear(tokens_per_expert, width_in * fe / t, h, local_experts)
            linear(tokens_per_expert, h, fe / t, local_experts)
            if moe.shared_expert_ffn_hidden_size:
                fs = moe.shared_expert_ffn_hidden_size
                linear(T, width_in * fs / t, h)
                linear(T, h, fs / t)
            router = kernels.gemm_s(T, moe.n_experts, h)  # bf16
            fwd_parts.append(router)
            bwd_parts.append(2.0 * router)
            # Permute/unpermute copies and the experts' activation function.
            mlp_bytes = 8.0 * T * moe.top_k * h + elementwise_mlp * T * moe.top_k * fe / t
            mlp_bytes = mlp_bytes + elementwise_mlp * T * moe.shared_expert_ffn_hidden_size / t
        else:
            f = model.ffn_hidden_size
            linear(T, width_in * f / t, h)
            linear(T, h, f / t)
            mlp_bytes = elementwise_mlp * T * f / t
        gemms = sum(fwd_parts)
        gemms_backward = sum(bwd_parts)
        # Attention core.  Flash attention: causal, masked blocks skipped, scores never written
        # (kernels.flash_attention_s).  Unfused (Megatron before FlashAttention): batched GEMMs
        # per head over the full square -- QK^T and PV forward (reduction over head_dim, then over
        # the sequence), four backward (dP, dQ, dK, dV) -- and the fused scale-mask-softmax and
        # dropout kernels moving every score through HBM: 4 bytes per score forward (read S,
        # write P) plus 5 with dropout (read, write, mask), 6 (+5) backward.
        heads = model.n_heads / t
        d = float(model.head_dim)
        if unfused_attention:
            g = kernels.gemm_s
            scores = T * seq_len * heads
            drop = 5.0 if model.dropout else 0.0
            attention = g(T, seq_len, d, heads) + g(T, d, seq_len, heads) + kernels.memory_bound_s((4.0 + drop) * scores)
            attention_backward = (g(T, seq_len, d, heads) + 3.0 * g(T, d, seq_len, heads)
                                  + kernels.memory_bound_s((6.0 + drop) * scores))
        else:
            scores = T * seq_len * heads / 2.0  # causal: half the square
            attention, attention_backward = kernels.flash_attention_s(scores, model.head_dim)
        # Memory-bound ops, forward: 2 norms (read+write), 2 residual adds (2 reads, 1 write),
        # dropout (if any) on the replicated h-wide tensors (split by TP only with SP);
        # rotary on q and k; the MLP activation.  (fp8 casts are part of kernels.linear_s.)
        sp_div = np.where(geo.sp, t, 1.0)
        replicated = (20.0 + (10.0 if model.dropout else 0.0)) * T * h / sp_div
        rotary = 4.0 * T * (model.q_width + model.kv_width) / t
        elementwise = kernels.memory_bound_s(replicated + rotary + mlp_bytes)

        self.gemm_forward = gemms
        self.attention_forward = attention
        self.selective_recompute = 0.5 * gemms + elementwise
        self.forward_compute = gemms + attention + elementwise
        self.backward_compute = gemms_backward + attention_backward + 2.0 * elementwise

        eff = cluster.hardware.efficiency
        # TP: two all-reduces forward and two backward of the h-wide activations; with sequence
        # parallelism each becomes an all-gather plus a reduce-scatter of the same total bytes.
        tp_bytes = 2.0 * T * h
        per_collective = np.where(
            geo.sp,
            comm.all_gather_s(tp_bytes, geo.tp_group, cluster) + comm.reduce_scatter_s(tp_bytes, geo.tp_group, cluster),
            comm.all_reduce_s(tp_bytes, geo.tp_group, cluster),
        )
        self.tp_forward = np.where(t > 1, 2.0 * per_collective * (1.0 - eff.tp_overlap), 0.0)
        # CP (ring attention): cp-1 exchanges of this rank's K and V blocks forward, and of
        # K, V and their gradients backward, hidden behind the attention compute up to cp_overlap.
        kv_bytes = 2.0 * 2.0 * T * model.kv_width / t
        ring_step = comm.point_to_point_s(kv_bytes, geo.cp_group.nodes > 1, cluster)
        cp_forward = (geo.cp - 1.0) * ring_step
        self.cp_forward = np.maximum(0.0, cp_forward - eff.cp_overlap * attention)
        self.cp_backward = np.maximum(0.0, 2.0 * cp_forward - eff.cp_overlap * attention_backward)
        # EP: dispatch and combine all-to-alls of top_k copies of each token, forward and backward.
        if moe_layer and model.moe:
            a2a_bytes = 2.0 * T * model.moe.top_k * h / sp_div
            a2a = 2.0 * comm.all_to_all_s(a2a_bytes, geo.ep_group, cluster) * (1.0 - eff.ep_overlap)
            self.ep_forward = np.where(geo.ep > 1, a2a, 0.0)
        else:
            self.ep_forward = np.zeros_like(t)


def step_time_parts(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, geo: Geometry,
    attention_kernel: str = "flash", zero3_collectives: str = "block",
) -> dict[str, np.ndarray]:
    """Seconds per training step, split into the parts of :data:`TIME_PARTS` (they sum to the step)."""
    hw = cluster.hardware
    eff = hw.efficiency
    kernels = Kernels(hw, plans.precision == FP8, attention_kernel)
    recompute = np.asarray(plans.recompute)
    full, selective = recompute == FULL, recompute == SELECTIVE
    s = workload.seq_len
    unfused = attention_kernel == "unfused"

    layers = []
    if model.n_dense_layers:
        layers.append((model.n_dense_layers / model.n_layers, _Layer(model, geo, kernels, cluster, s, False, unfused)))
    if model.n_moe_layers:
        layers.append((model.n_moe_layers / model.n_layers, _Layer(model, geo, kernels, cluster, s, True, unfused)))

    def mix(attr: str) -> np.ndarray:
        return sum(share * getattr(layer, attr) for share, layer in layers)

    fwd, bwd = mix("forward_compute"), mix("backward_compute")
    # Selective recomputation.  Unfused attention (Korthikanti et al. 2022): recompute the
    # attention core.  Flash attention never stores the scores, so that policy would change
    # nothing; there `selective` means PyTorch's op-level policy (torchtitan's selective AC,
    # torchtitan/models/llama/parallelize_llama.py `_save_list`): keep the outputs of the
    # attention kernel and of every second matmul, recompute the other matmuls and all
    # element-wise ops (about half the weight GEMMs and the memory-bound work of the forward).
    selective_cost = mix("attention_forward") if unfused else mix("selective_recompute")
    recompute_per_layer = np.where(full, fwd, np.where(selective, selective_cost, 0.0))
    tp_f, cp_f, cp_b, ep_f = mix("tp_forward"), mix("cp_forward"), mix("cp_backward"), mix("ep_forward")
    # Full recomputation repeats the forward's communication too.
    comm_repeat = np.where(full, 2.0, 1.0)
    tp_layer = tp_f * (1.0 + comm_repeat)
    cp_layer = cp_f * comm_repeat + cp_b
    ep_layer = ep_f * (1.0 + comm_repeat)

    n_layers = geo.layers_per_stage
    stage_fwd = n_layers * fwd
    stage_bwd = n_layers * bwd

    # ZeRO-3 (FSDP full shard) gathers the stage's weights forward and again backward and
    # reduce-scatters its gradients, every micro-batch; ZeRO-2 reduce-scatters every
    # micro-batch.  Prefetching hides them behind compute up to dp_overlap.  FSDP and
    # ZeRO-3 issue one collective per layer (one FSDP unit per transformer block, plus one
    # for the embedding and output layer), so a collective's ring latency counts once per
    # layer; ZeRO-1/2 and DDP reduce bucketed gradients (counted as one per stage).
    dense_params = n_layers * geo.dense_params_per_layer
    expert_params = n_layers * geo.expert_params_per_layer
    # The fuller of the first stage (input embedding) and the last (output layer; with one
    # stage and tied embeddings there is only one matrix).
    edge_params = np.maximum(geo.embedding_params, geo.output_params)
    zero = np.asarray(plans.zero)
    units = n_layers + 1.0
    nics = None
    if zero3_collectives == SUBMODULE_GRANULAR:
        # DeepSpeed ZeRO-3 of 2021 fetches (and reduces) the parameters of each submodule on
        # its own (every linear and norm), so a layer costs ``zero3_submodules_per_layer`` ring
        # collectives, each paying the whole group's ring latency; and each collective's
        # per-rank chunk is tiny (a submodule / dp), so NCCL runs it on a single channel and its
        # cross-node traffic leaves through one NIC, not the node's eight.
        # Its 16-bit gradients are reduced in their own precision (DeepSpeed's default
        # communication data type), not in fp32.
        units = n_layers * zero3_submodules_per_layer(model) + 2.0
        nics = 1.0
        grad_comm_bytes = 2.0
    else:
        grad_comm_bytes = 4.0

    def gather(params, group, count):
        return count * comm.all_gather_s(2.0 * params / count, group, cluster, nics)

    def scatter(params, group, count):
        return count * comm.reduce_scatter_s(grad_comm_bytes * params / count, group, cluster, nics)

    gather_s = gather(dense_params + edge_params, geo.dp_group, units) + gather(expert_params, geo.expert_dp_group, units)
    scatter_s = (scatter(dense_params + edge_params, geo.dp_group, units)
                 + scatter(expert_params, geo.expert_dp_group, units))
    scatter_once = (scatter(dense_params + edge_params, geo.dp_group, 1.0)
                    + scatter(expert_params, geo.expert_dp_group, 1.0))
    gather_once_s = gather(dense_params + edge_params, geo.dp_group, 1.0) + gather(expert_params, geo.expert_dp_group, 1.0)
    zero3_mb = np.maximum(0.0, gather_s - eff.dp_overlap * stage_fwd) + np.maximum(
        0.0, gather_s + scatter_s - eff.dp_overlap * stage_bwd
    )
    # ZeRO-2 (FSDP2 without resharding after forward, FSDP SHARD_GRAD_OP): gradients of the
    # micro-batches accumulate unsharded and are reduce-scattered once per step (below), as
    # torch.distributed.pipelining and FSDP's no_sync do; see memory.py for the buffer.
    dp_per_microbatch = np.where(zero >= 3, zero3_mb, 0.0)

    # Pipeline sends: the h-wide activation forward and its gradient backward, per chunk boundary.
    # Megatron-LM splits the message over the TP ranks and all-gathers it over NVLink on the
    # other side (the scatter/gather optimisation, Narayanan et al. 2021 §4.1; implicit with
    # sequence parallelism), so each rank sends 1/tp of it.
    pp_bytes = 2.0 * geo.tokens * model.hidden_size / geo.tp
    pp_per_microbatch = np.where(
        geo.pp > 1,
        2.0 * geo.vp * comm.point_to_point_s(pp_bytes, geo.pp_crosses_nodes, cluster) * (1.0 - eff.pp_overlap),
        0.0,
    )

    # Logits and loss on the last stage: a GEMM forward, two backward, plus softmax traffic.
    logits_gemm = kernels.gemm_s(geo.tokens, model.vocab_size / geo.tp, float(model.hidden_size))
    logits = 3.0 * logits_gemm + kernels.memory_bound_s(16.0 * geo.tokens * model.vocab_size / geo.tp)

    per_mb = {
        "compute": stage_fwd + stage_bwd,
        "recompute": n_layers * recompute_per_layer,
        "tp_comm": n_layers * tp_layer,
        "cp_comm": n_layers * cp_layer,
        "ep_comm": n_layers * ep_layer,
        "dp_comm": dp_per_microbatch,
        "pp_comm": pp_per_microbatch,
    }
    body = sum(per_mb.values())  # one micro-batch on a stage without the logits
    m = geo.microbatches
    parts = {key: m * value for key, value in per_mb.items()}
    parts["compute"] = parts["compute"] + m * logits
    # The other p-1 stages' single pass (fill and drain), shortened by interleaving.
    parts["pipeline_bubble"] = (geo.pp - 1.0) * body / geo.vp

    # Once per step: gradient reduction not hidden behind the last micro-batch's backward,
    # and (ZeRO 0-2) the all-gather of updated weights not hidden behind the next forward.
    dense_grads = 4.0 * (dense_params + edge_params)
    reduce_once = np.where(
        zero == 0,
        comm.all_reduce_s(dense_grads, geo.dp_group, cluster)
        + comm.all_reduce_s(4.0 * expert_params, geo.expert_dp_group, cluster),
        np.where((zero == 1) | (zero == 2), scatter_once, 0.0),
    )
    gather_once = np.where((zero == 1) | (zero == 2), gather_once_s, 0.0)
    parts["dp_comm"] = (
        parts["dp_comm"]
        + np.maximum(0.0, reduce_once - eff.dp_overlap * stage_bwd)
        + np.maximum(0.0, gather_once - eff.dp_overlap * stage_fwd)
    )

    # Optimizer step on this GPU's shard (ZeRO >= 1 shards it over dp*cp).
    shard_dense = np.where(zero >= 1, geo.dense_shard, 1.0)
    shard_expert = np.where(zero >= 1, geo.expert_shard, 1.0)
    stage_params = dense_params + edge_params
    local_params = stage_params / shard_dense + expert_params / shard_expert
    offload = np.asarray(plans.offload) == 1
    on_gpu = kernels.memory_bound_s(OPTIMIZER_BYTES_PER_PARAM * local_params)
    on_host = local_params / hw.cpu_optimizer_params_per_s
    host_traffic = HOST_BYTES_PER_PARAM * local_params / (hw.host_link_bandwidth_gb_per_s * 1e9)
    parts["optimizer"] = np.where(offload, on_host, on_gpu)
    parts["offload"] = np.where(offload, host_traffic, 0.0)
    parts["overhead"] = np.full_like(m, eff.step_overhead_s)
    return {key: parts[key] for key in TIME_PARTS}
