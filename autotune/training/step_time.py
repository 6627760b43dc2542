"""Step time of a training plan and its parts (docs/cost-model.md).

One micro-batch on one pipeline stage costs the forward and backward of its
layers (GEMMs, attention, memory-bound ops), recomputation, and the *exposed*
part of its TP / CP / EP communication and ZeRO-3 gathers.  A 1F1B pipeline of
``p`` stages with ``m`` micro-batches and ``v`` chunks per rank takes
``(max(m, p) + (min(m, p) - 1) / v)`` stage passes (Narayanan et al. 2021 for
``m >= p``: bubble ``(p-1)/(v*m)``; with fewer micro-batches than stages a
micro-batch's path through all ``v*p`` chunks binds, so interleaving barely helps);
the last stage, which also computes the logits and loss, is the slowest, so its
extra work counts ``m`` times.  Then the data-parallel gradient reduction that
backward could not hide, the optimizer step, and a fixed per-step overhead.

What the software does enters through its :class:`~autotune.inputs.framework.Framework`:
the attention kernel, what ``selective`` recompute re-runs, how much of each
collective it hides and on which link (never more than the compute the collective
runs beside: a collective longer than that compute is exposed by the difference),
ZeRO-2's and ZeRO-3's collective pattern, and the fp8 cast traffic.

Kernel times (GEMM pipeline fill, flash attention's softmax cost, fp8 casts) are in
kernels.py; collective times (ring latency of all-gather/reduce-scatter) in comm.py.
FSDP / ZeRO-3 collectives are issued per layer; pipeline sends carry 1/tp of the
activation (Megatron's scatter/gather).  docs/accuracy.md records what each of these
changed against measured runs.
"""

from __future__ import annotations

import numpy as np

from ..costmodel import comm
from ..costmodel.kernels import Kernels
from ..inputs.framework import Framework
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


# Granularity of ZeRO-3 / FSDP parameter collectives (the framework's `zero3_collectives`):
# "block" -- one flat all-gather / reduce-scatter per transformer block (PyTorch FSDP, FSDP2,
# Megatron-FSDP); "submodule" -- one per submodule (linear or norm), with per-rank chunks too
# small to spread over a node's NICs (DeepSpeed ZeRO-3; Narayanan et al. 2021 Table 2).
BLOCK_GRANULAR = "block"
SUBMODULE_GRANULAR = "submodule"


def zero3_submodules_per_layer(model: ModelSpec) -> float:
    """Submodules of one layer that DeepSpeed's 2021 ZeRO-3 fetched one at a time.

    The two norms, the fused QKV and attention-output linears, and each MLP matrix.
    """
    return 2.0 + 2.0 + model.mlp_matrices


def exposed(comm_s: np.ndarray, overlap: np.ndarray | float, compute_s: np.ndarray) -> np.ndarray:
    """A chunked collective (TE userbuffers, async TP, batch-level EP overlap): the framework hides
    ``overlap`` of it, but never more than the ``compute_s`` it runs beside (a collective longer than
    that compute is exposed by the difference)."""
    return comm_s - np.minimum(overlap * comm_s, compute_s)


def exposed_behind(comm_s: np.ndarray, window: np.ndarray | float, compute_s: np.ndarray) -> np.ndarray:
    """A collective on its own stream beside compute (bucketed gradient reduction, ZeRO-3 prefetch, ring
    attention): hidden behind up to ``window`` of ``compute_s`` (what contention for SMs and memory leaves
    usable), exposed by the rest."""
    return np.maximum(0.0, comm_s - window * compute_s)


def pipeline_passes(m: np.ndarray, p: np.ndarray, v: np.ndarray) -> np.ndarray:
    """Stage passes (of one micro-batch through all of a rank's layers) in a step of a 1F1B pipeline.

    ``m >= p``: ``m + (p-1)/v`` (Narayanan et al. 2021, §2.2: bubble ``(p-1)/(v m)``).  ``m < p``:
    every micro-batch crosses ``v*p`` chunks of ``1/v`` pass each, one after another, and no rank is
    busy enough to queue them, so the step is the path of the first micro-batch plus the ``m - 1``
    that follow one chunk behind: ``p + (m-1)/v``.  Both read ``max(m, p) + (min(m, p) - 1) / v``;
    with ``v = 1`` it is the familiar ``m + p - 1``.
    """
    return np.maximum(m, p) + (np.minimum(m, p) - 1.0) / v


class _Layer:
    """Forward, backward and communication times of one layer for one micro-batch (arrays)."""

    def __init__(self, model: ModelSpec, geo: Geometry, kernels: Kernels, cluster: Cluster, seq_len: int, moe_layer: bool,
                 framework: Framework):
        h = float(model.hidden_size)
        t, T = geo.tp, geo.tokens
        lin = kernels.linear_s
        unfused_attention = framework.attention == "unfused"
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
        # Attention core.  Flash attention (FlashAttention-2, cuDNN fused): causal, masked blocks
        # skipped, scores never written (kernels.flash_attention_s).  Unfused (Megatron before
        # FlashAttention): batched GEMMs per head over the full square -- QK^T and PV forward
        # (reduction over head_dim, then over the sequence), four backward (dP, dQ, dK, dV) -- and
        # the fused scale-mask-softmax and dropout kernels moving every score through HBM: 4 bytes
        # per score forward (read S, write P) plus 5 with dropout (read, write, mask), 6 (+5) backward.
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
            attention, attention_backward = kernels.flash_attention_s(scores, model.head_dim, seq_len / geo.cp)
        # Memory-bound ops, forward: 2 norms (read+write), 2 residual adds (2 reads, 1 write),
        # dropout (if any) on the replicated h-wide tensors (split by TP only with SP);
        # rotary on q and k; the MLP activation.  (fp8 casts are part of kernels.linear_s.)
        sp_div = np.where(geo.sp, t, 1.0)
        replicated = (20.0 + (10.0 if model.dropout else 0.0)) * T * h / sp_div
        rotary = 4.0 * T * (model.q_width + model.kv_width) / t
        elementwise = kernels.memory_bound_s(replicated + rotary + mlp_bytes)

        self.gemm_forward = gemms
        self.attention_forward = attention
        # PyTorch op-level selective checkpointing recomputes about half the weight GEMMs and the
        # element-wise ops (framework.selective_recompute == "op_sac"; memory.py).
        self.op_sac_recompute = 0.5 * gemms + elementwise
        self.forward_compute = gemms + attention + elementwise
        self.backward_compute = gemms_backward + attention_backward + 2.0 * elementwise

        # TP: two all-reduces forward and two backward of the h-wide activations; with sequence
        # parallelism each becomes an all-gather plus a reduce-scatter of the same total bytes.  A
        # group larger than a node runs at the network's bandwidth (comm.Topology).  The framework
        # hides its overlap fraction for the link the group uses (TE userbuffers and async TP only
        # inside the NVLink domain), at most the GEMM time of the same pass.
        tp_bytes = 2.0 * T * h
        per_collective = np.where(
            geo.sp,
            comm.all_gather_s(tp_bytes, geo.tp_group, cluster) + comm.reduce_scatter_s(tp_bytes, geo.tp_group, cluster),
            comm.all_reduce_s(tp_bytes, geo.tp_group, cluster),
        )
        tp_overlap = np.where(geo.tp_group.nodes > 1, framework.tp_overlap_network, framework.tp_overlap_nvlink)
        if framework.tp_overlap_needs_sp:
            tp_overlap = np.where(geo.sp, tp_overlap, 0.0)
        tp_pass = 2.0 * per_collective
        self.tp_forward = np.where(t > 1, exposed(tp_pass, tp_overlap, gemms), 0.0)
        self.tp_backward = np.where(t > 1, exposed(tp_pass, tp_overlap, gemms_backward), 0.0)
        # CP (ring attention): cp-1 exchanges of this rank's K and V blocks forward, and of
        # K, V and their gradients backward, hidden behind the attention compute up to cp_overlap;
        # across nodes the exchange runs at the network's bandwidth.
        kv_bytes = 2.0 * 2.0 * T * model.kv_width / t
        ring_step = comm.point_to_point_s(kv_bytes, geo.cp_group.nodes > 1, cluster)
        cp_forward = (geo.cp - 1.0) * ring_step
        self.cp_forward = exposed_behind(cp_forward, framework.cp_overlap, attention)
        self.cp_backward = exposed_behind(2.0 * cp_forward, framework.cp_overlap, attention_backward)
        # EP: dispatch and combine all-to-alls of top_k copies of each token, forward and backward,
        # on the link the EP group uses; the framework hides its overlap fraction for that link
        # behind other work of the layer (another micro-batch's, Megatron-Core's batch-level overlap).
        if moe_layer and model.moe:
            a2a_bytes = 2.0 * T * model.moe.top_k * h / sp_div
            a2a = 2.0 * comm.all_to_all_s(a2a_bytes, geo.ep_group, cluster)
            ep_overlap = np.where(geo.ep_group.nodes > 1, framework.ep_overlap_network, framework.ep_overlap_nvlink)
            self.ep_forward = np.where(geo.ep > 1, exposed(a2a, ep_overlap, self.forward_compute), 0.0)
            self.ep_backward = np.where(geo.ep > 1, exposed(a2a, ep_overlap, self.backward_compute), 0.0)
        else:
            self.ep_forward = np.zeros_like(t)
            self.ep_backward = np.zeros_like(t)


def step_time_parts(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, geo: Geometry, framework: Framework,
) -> dict[str, np.ndarray]:
    """Seconds per training step, split into the parts of :data:`TIME_PARTS` (they sum to the step)."""
    hw = cluster.hardware
    eff = hw.efficiency
    fw = framework
    kernels = Kernels(hw, plans.precision == FP8, fw.attention, fw.fp8_cast_bytes)
    recompute = np.asarray(plans.recompute)
    full, selective = recompute == FULL, recompute == SELECTIVE
    s = workload.seq_len

    layers = []
    if model.n_dense_layers:
        layers.append((model.n_dense_layers / model.n_layers, _Layer(model, geo, kernels, cluster, s, False, fw)))
    if model.n_moe_layers:
        layers.append((model.n_moe_layers / model.n_layers, _Layer(model, geo, kernels, cluster, s, True, fw)))

    def mix(attr: str) -> np.ndarray:
        return sum(share * getattr(layer, attr) for share, layer in layers)

    fwd, bwd = mix("forward_compute"), mix("backward_compute")
    # Selective recomputation, as the framework emits it: Megatron's `--recompute-granularity
    # selective` re-runs the attention core (Korthikanti et al. 2022; Megatron-Core recompute_modules
    # [core_attn]); PyTorch's op-level SAC (torchtitan `selective_ac_option = 'op'`, parallelize_llama.py
    # `_save_list`) keeps the attention kernel's output and every second matmul output and re-runs the
    # other matmuls and the element-wise ops.  A framework without it never gets such a plan (space.py).
    if fw.selective_recompute == "op_sac":
        selective_cost = mix("op_sac_recompute")
    elif fw.selective_recompute == "core_attention":
        selective_cost = mix("attention_forward")
    else:
        selective_cost = np.zeros_like(fwd)
    recompute_per_layer = np.where(full, fwd, np.where(selective, selective_cost, 0.0))
    tp_f, tp_b = mix("tp_forward"), mix("tp_backward")
    cp_f, cp_b, ep_f, ep_b = mix("cp_forward"), mix("cp_backward"), mix("ep_forward"), mix("ep_backward")
    # Full recomputation repeats the forward's communication too.
    comm_repeat = np.where(full, 2.0, 1.0)
    tp_layer = tp_f * comm_repeat + tp_b
    cp_layer = cp_f * comm_repeat + cp_b
    ep_layer = ep_f * comm_repeat + ep_b

    n_layers = geo.layers_per_stage
    stage_fwd = n_layers * fwd
    stage_bwd = n_layers * bwd

    # ZeRO-3 (FSDP full shard) gathers the stage's weights forward and again backward and
    # reduce-scatters its gradients, every micro-batch; prefetching hides them behind compute up
    # to the framework's zero3_overlap.  FSDP and ZeRO-3 issue one collective per layer (one FSDP
    # unit per transformer block, plus one for the embedding and output layer), so a collective's
    # ring latency counts once per layer; ZeRO-1/2 and DDP reduce bucketed gradients (counted as
    # one per stage).
    dense_params = n_layers * geo.dense_params_per_layer
    expert_params = n_layers * geo.expert_params_per_layer
    # The fuller of the first stage (input embedding) and the last (output layer; with one
    # stage and tied embeddings there is only one matrix).
    edge_params = np.maximum(geo.embedding_params, geo.output_params)
    zero = np.asarray(plans.zero)
    units = n_layers + 1.0
    nics = None
    grad_comm_bytes = fw.grad_bytes  # gradients are reduced in the precision the framework keeps them in
    if fw.zero3_collectives == SUBMODULE_GRANULAR:
        # DeepSpeed ZeRO-3 fetches (and reduces) the parameters of each submodule on its own
        # (every linear and norm), so a layer costs ``zero3_submodules_per_layer`` ring
        # collectives, each paying the whole group's ring latency; and each collective's
        # per-rank chunk is tiny (a submodule / dp), so NCCL runs it on a single channel and its
        # cross-node traffic leaves through one NIC, not the node's eight.
        units = n_layers * zero3_submodules_per_layer(model) + 2.0
        nics = 1.0

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
    zero3_mb = (exposed_behind(gather_s, fw.zero3_overlap, stage_fwd)
                + exposed_behind(gather_s + scatter_s, fw.zero3_overlap, stage_bwd))
    # ZeRO-2: DeepSpeed (and FSDP without no_sync) reduce-scatter each micro-batch's gradients into
    # the shard (`reduce_per_microbatch`, DeepSpeed issue #2252); FSDP2 under torch.distributed.pipelining
    # accumulates them unsharded and reduce-scatters once per step (`accumulate_unsharded`, below;
    # memory.py holds the buffer).
    per_microbatch_rs = (fw.zero2 == "reduce_per_microbatch") & (zero == 2) & (geo.microbatches > 1)
    zero2_mb = np.where(per_microbatch_rs, exposed_behind(scatter_once, fw.dp_overlap, stage_bwd), 0.0)
    dp_per_microbatch = np.where(zero >= 3, zero3_mb, zero2_mb)

    # Pipeline sends: the h-wide activation forward and its gradient backward, per chunk boundary.
    # Megatron-LM splits the message over the TP ranks and all-gathers it over NVLink on the
    # other side (the scatter/gather optimisation, Narayanan et al. 2021 §4.1; implicit with
    # sequence parallelism), so each rank sends 1/tp of it.
    pp_bytes = 2.0 * geo.tokens * model.hidden_size / geo.tp
    pp_per_microbatch = np.where(
        geo.pp > 1,
        2.0 * geo.vp * comm.point_to_point_s(pp_bytes, geo.pp_crosses_nodes, cluster) * (1.0 - fw.pp_overlap),
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
    # Fill and drain: the passes beyond the m of this stage (pipeline_passes), shortened by interleaving.
    parts["pipeline_bubble"] = (pipeline_passes(m, geo.pp, geo.vp) - m) * body

    # Once per step: gradient reduction not hidden behind the last micro-batch's backward,
    # and (ZeRO 0-2) the all-gather of updated weights not hidden behind the next forward.
    dense_grads = grad_comm_bytes * (dense_params + edge_params)
    once_zero2 = np.where(fw.zero2 == "reduce_per_microbatch", np.where(geo.microbatches > 1, 0.0, scatter_once),
                          scatter_once)
    reduce_once = np.where(
        zero == 0,
        comm.all_reduce_s(dense_grads, geo.dp_group, cluster)
        + comm.all_reduce_s(grad_comm_bytes * expert_params, geo.expert_dp_group, cluster),
        np.where(zero == 1, scatter_once, np.where(zero == 2, once_zero2, 0.0)),
    )
    gather_once = np.where((zero == 1) | (zero == 2), gather_once_s, 0.0)
    parts["dp_comm"] = (
        parts["dp_comm"]
        + exposed_behind(reduce_once, fw.dp_overlap, stage_bwd)
        + exposed_behind(gather_once, fw.dp_overlap, stage_fwd)
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
