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
from ..inputs.modelspec import ModelSpec, mean_keys_per_query
from ..inputs.workload import TrainWorkload
from .geometry import Geometry
from .plan import PRECISION, RECOMPUTE, PlanBatch

FULL = RECOMPUTE.index("full")
SELECTIVE = RECOMPUTE.index("selective")
FP8 = PRECISION.index("fp8")
FP4 = PRECISION.index("fp4")
FP16 = PRECISION.index("fp16")
OPTIMIZER_BYTES_PER_PARAM = 30.0  # Adam step: read/write fp32 master, m, v (24), read fp32 grad (4), write bf16 weight (2)
HOST_BYTES_PER_PARAM = 6.0  # offload: fp32 gradient down, bf16 weight back up

TIME_PARTS = (
    "compute", "recompute", "tp_comm", "cp_comm", "ep_comm", "host_bound", "pp_comm", "pipeline_bubble",
    "dp_comm", "optimizer", "offload", "overhead",
)
# Share of a MoE block's host ops issued in the forward pass: autograd runs about two backward ops per
# forward op (a GEMM's dgrad and wgrad; TransformerEngine GroupedLinear's backward: two GEMMs, a cast and
# a buffer per expert where the forward has one GEMM and a cast).  A count of the code paths, judgement.
HOST_FORWARD_SHARE = 1.0 / 3.0


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


# DeepSeek-V3 §3.2.2: the all-to-all kernels of the overlapped dispatch and combine take 20 of the
# H800's 132 SMs; the compute beside them runs on the rest.  An all-to-all hidden behind compute so
# costs that compute this share of its time (DeepEP's normal kernels take a similar SM budget,
# --moe-flex-dispatcher-num-sms; NCCL's all-to-all runs on SMs too).
OVERLAPPED_A2A_SM_SHARE = 20.0 / 132.0
# Bytes per element of an fp8 dispatch: e4m3 values and one fp32 scale per 128 (DeepSeek-V3 §3.3.1-3).
FP8_DISPATCH_BYTES = 1.0 + 4.0 / 128.0


def expected_remote_domains(model: ModelSpec, domains: np.ndarray) -> np.ndarray:
    """Distinct NVLink domains other than its own that one token's routed experts sit in, on average.

    The experts are spread evenly over the EP group's ``domains`` domains and routing is balanced.
    Without group-limited routing a token's ``k`` experts fall in ``d(1 - C(E - E/d, k)/C(E, k))``
    domains.  With it (``routing_groups`` G, the best ``routing_group_topk`` M), the experts lie in M
    groups: where groups nest in domains (G a multiple of d: DeepSeek-V3's 8 groups on 8 nodes), the
    token reaches ``d(1 - C(G - G/d, M)/C(G, M))`` domains -- at most M, DeepSeek's node-limited
    routing (§2.1.2, §3.2.2); where each group spans d/G domains, ``k`` experts spread over its M*d/G.
    The token's own domain is one of them with probability 1/d.
    """
    from math import comb

    moe = model.moe
    d = np.asarray(domains, dtype=np.float64)
    out = np.zeros_like(d)
    for value in np.unique(d):
        n = int(value)
        if n <= 1:
            continue
        E, k, G, M = moe.n_experts, moe.top_k, moe.routing_groups, moe.routing_group_topk
        if G > 1 and G % n == 0:
            reached = n * (1.0 - comb(G - G // n, M) / comb(G, M))
        elif G > 1 and n % G == 0:
            span = M * n / G
            reached = span * (1.0 - (1.0 - 1.0 / span) ** k)
        elif E % n == 0:
            reached = n * (1.0 - comb(E - E // n, k) / comb(E, k))
        else:
            reached = n * (1.0 - (1.0 - 1.0 / n) ** k)
        out = np.where(d == value, reached * (n - 1.0) / n, out)
    return out


def layer_mix(model: ModelSpec) -> list[tuple[float, str, bool]]:
    """(share, attention kind, MoE) of the blocks a pipeline splits: every layer, and each MTP block
    (a full-attention block whose MLP is the last layer's; DeepSeek-V3 §2.2)."""
    kinds = model.layer_kinds
    moe_layers = set()
    if model.moe:
        moe_layers = set(range(model.moe.first_dense_layers, model.n_layers, model.moe.layer_interval))
    counts: dict[tuple[str, bool], int] = {}
    for i in range(model.n_layers):
        key = (kinds[i], i in moe_layers)
        counts[key] = counts.get(key, 0) + 1
    if model.mtp_layers:
        key = ("full", model.mtp_block_is_moe)
        counts[key] = counts.get(key, 0) + model.mtp_layers
    total = float(model.n_layers + model.mtp_layers)
    return [(count / total, kind, moe) for (kind, moe), count in counts.items()]


class _Layer:
    """Forward, backward and communication times of one block for one micro-batch (arrays)."""

    def __init__(self, model: ModelSpec, geo: Geometry, kernels: Kernels, cluster: Cluster, workload: TrainWorkload,
                 moe_layer: bool, framework: Framework, kind: str, plans: PlanBatch):
        seq_len = workload.seq_len
        h = float(model.hidden_size)
        t, T = geo.tp, geo.tokens
        unfused_attention = framework.attention == "unfused"
        sp_div = np.where(geo.sp, t, 1.0)
        # Weight GEMMs (linear layers): forward, input gradient and weight gradient, in the plan's precision.
        fwd_parts, dgrad_parts, wgrad_parts = [], [], []
        self.gemm_flops = np.zeros_like(t)  # forward weight-GEMM FLOPs this rank runs (a check on the shapes)

        def add(parts, flops):
            f, d, w = parts
            fwd_parts.append(f)
            dgrad_parts.append(d)
            wgrad_parts.append(w)
            self.gemm_flops = self.gemm_flops + flops
            return f

        def linear(m, n, k, count=1.0):
            return add(kernels.linear_parts(m, n, k, count), 2.0 * m * n * k * count)

        # --- attention projections, by kind -------------------------------------------------
        up_projection = np.zeros_like(t)  # MLA up-projections' forward (what mla_up_proj recompute repeats)
        a = float(model.n_heads)
        if kind == "linear":
            la = model.linear_attention
            linear(T, (la.conv_channels + la.value_width + 2 * la.n_value_heads) / t, h)
            linear(T, h, la.value_width / t)
            core_kv_width = 0.0
        elif model.mla is not None:
            # Multi-head latent attention (DeepSeek-V2 §2.1): the down-projections to the latents are
            # small and replicated on every TP rank (Megatron-Core MLASelfAttention: duplicated linears);
            # the up-projections and the output projection are split over the heads.
            mla = model.mla
            if mla.q_lora_rank:
                linear(T, float(mla.q_lora_rank), h)
                up_projection = up_projection + linear(T, a * mla.qk_head_dim / t, float(mla.q_lora_rank))
            else:
                linear(T, a * mla.qk_head_dim / t, h)
            linear(T, float(mla.kv_lora_rank + mla.qk_rope_head_dim), h)
            up_projection = up_projection + linear(T, a * (mla.qk_nope_head_dim + mla.v_head_dim) / t,
                                                   float(mla.kv_lora_rank))
            linear(T, h, a * mla.v_head_dim / t)
            if model.dsa is not None:  # the lightning indexer's projections (replicated)
                dsa = model.dsa
                linear(T, float(dsa.index_n_heads * dsa.index_head_dim), float(mla.q_lora_rank))
                linear(T, float(dsa.index_head_dim + dsa.index_n_heads), h)
            core_kv_width = a * (mla.qk_head_dim + mla.v_head_dim)  # K and V per token, expanded per head
        else:
            q_out = model.q_width * (2 if model.attention_output_gate else 1)
            linear(T, (q_out + 2 * model.kv_width) / t, h)
            linear(T, h, model.q_width / t)
            core_kv_width = 2.0 * model.kv_width

        # --- MLP: dense, or routed experts, shared experts and router -----------------------
        width_in = (model.mlp_matrices - 1.0)  # gate+up fused for SwiGLU
        elementwise_mlp = (4.0 if model.mlp == "gelu" else 6.0)
        self.moe = bool(moe_layer and model.moe)
        self.host_forward = np.zeros_like(t)  # host issue time of the block (MoE blocks only, below)
        self.host_backward = np.zeros_like(t)
        if self.moe:
            moe = model.moe
            etp, imbalance = geo.etp, workload.moe_expert_load(geo.ep)
            local_experts = moe.n_experts / geo.ep
            # Token copies this rank's experts process: the T/tp distinct tokens of each of the etp ranks
            # of its expert-TP group, k copies each (MoE parallel folding); the busiest rank gets
            # ``imbalance`` times the mean (or, dropping and padding tokens, its capacity factor times it).
            copies = moe.top_k * T * etp / t * imbalance
            per_expert = copies / local_experts
            fe = moe.expert_ffn_hidden_size
            # One grouped kernel for the local experts (DeepGEMM, CUTLASS, torch._grouped_mm), or one GEMM
            # launch per expert (TransformerEngine's GroupedLinear in Megatron-Core): framework.grouped_gemm.
            grouped = (kernels.grouped_linear_parts if framework.grouped_gemm == "single_kernel"
                       else kernels.linear_parts)
            add(grouped(per_expert, width_in * fe / etp, h, local_experts), 2.0 * copies * width_in * fe / etp * h)
            add(grouped(per_expert, h, fe / etp, local_experts), 2.0 * copies * h * fe / etp)
            if moe.shared_expert_ffn_hidden_size:
                fs = moe.shared_expert_ffn_hidden_size
                linear(T, width_in * fs / t, h)
                linear(T, h, fs / t)
            router = kernels.gemm_s(T / sp_div, moe.n_experts, h)  # bf16, on the rank's own tokens
            add((router, router, router), 2.0 * T / sp_div * moe.n_experts * h)
            # Permute/unpermute copies and the experts' activation function.
            mlp_bytes = 8.0 * copies * h + elementwise_mlp * copies * fe / etp
            mlp_bytes = mlp_bytes + elementwise_mlp * T * moe.shared_expert_ffn_hidden_size / t
            # Host issue time of the block: Megatron-Core's alltoall dispatcher copies the tokens per expert
            # to the host and synchronises (DeepEP and torchtitan's all-to-all splits wait on the host as
            # well), so the host cannot run ahead of the GPU; after the sync it issues every op of the block
            # -- the fixed ones and, with one GEMM launch per expert (TransformerEngine GroupedLinear), those
            # of each local expert.  How it adds to the GPU time: step_time_parts (host_layer).  The
            # Megatron-Core MoE report (arXiv 2603.07685) calls it host-boundedness.  The ops and the
            # microseconds per op are the framework's (host_op_us, moe_host_ops, moe_host_ops_per_expert),
            # given for an x86 server host; the hardware's host_op_scale for its CPU (Grace: TE issue #2053).
            host_op_s = 1e-6 * framework.host_op_us * cluster.hardware.host_op_scale
            host_s = host_op_s * (framework.moe_host_ops + framework.moe_host_ops_per_expert * local_experts)
            host_s = np.broadcast_to(np.asarray(host_s, dtype=np.float64), t.shape)
            self.host_forward = HOST_FORWARD_SHARE * host_s
            self.host_backward = (1.0 - HOST_FORWARD_SHARE) * host_s
        else:
            f = model.ffn_hidden_size
            linear(T, width_in * f / t, h)
            linear(T, h, f / t)
            mlp_bytes = elementwise_mlp * T * f / t
        gemms = sum(fwd_parts)
        wgrad = sum(wgrad_parts)
        gemms_backward = sum(dgrad_parts) + wgrad

        # --- attention core ------------------------------------------------------------------
        # Flash attention (FlashAttention-2, cuDNN fused): causal, masked blocks skipped, scores never
        # written (kernels.flash_attention_s); a sliding layer sees at most its window, a DSA layer its
        # top-k keys (mean_keys_per_query).  Unfused (Megatron before FlashAttention): batched GEMMs per
        # head over the full square -- QK^T and PV forward (reduction over head_dim, then over the
        # sequence), four backward (dP, dQ, dK, dV) -- and the fused scale-mask-softmax and dropout
        # kernels moving every score through HBM: 4 bytes per score forward (read S, write P) plus 5
        # with dropout (read, write, mask), 6 (+5) backward.  Linear attention: a fixed cost per token.
        heads = model.n_heads / t
        d = float(model.head_dim)
        if kind == "linear":
            core = T * model.linear_attention.core_flops_per_token / t
            attention = kernels.attention_forward_s(core)
            attention_backward = 2.0 * attention
        elif unfused_attention:
            g = kernels.gemm_s
            scores = T * seq_len * heads
            drop = 5.0 if model.dropout else 0.0
            attention = g(T, seq_len, d, heads) + g(T, d, seq_len, heads) + kernels.memory_bound_s((4.0 + drop) * scores)
            attention_backward = (g(T, seq_len, d, heads) + 3.0 * g(T, d, seq_len, heads)
                                  + kernels.memory_bound_s((6.0 + drop) * scores))
        else:
            window = model.sliding_window if kind == "sliding" else None
            if model.dsa is not None:
                window = model.dsa.index_topk if window is None else min(window, model.dsa.index_topk)
            keys = mean_keys_per_query(seq_len, window)  # causal: half the square for full attention
            scores = T * heads * keys
            kv_len = (seq_len if window is None else min(seq_len, window)) / geo.cp
            value_dim = float(model.mla.v_head_dim) if model.mla is not None else None
            attention, attention_backward = kernels.flash_attention_s(scores, model.head_dim, kv_len, value_dim)
            if model.dsa is not None:  # the indexer scores every earlier key (ReLU(q.k), I_h heads)
                indexer = T * model.dsa.core_flops_per_key * mean_keys_per_query(seq_len, None) / t
                attention = attention + kernels.attention_forward_s(indexer)
                attention_backward = attention_backward + 2.0 * kernels.attention_forward_s(indexer)
        # Memory-bound ops, forward: 2 norms (read+write), 2 residual adds (2 reads, 1 write),
        # dropout (if any) on the replicated h-wide tensors (split by TP only with SP);
        # rotary on q and k; the MLP activation.  (fp8 casts are part of kernels.linear_s.)
        replicated = (20.0 + (10.0 if model.dropout else 0.0)) * T * h / sp_div
        rotary = 0.0 if kind == "linear" else 4.0 * T * (model.q_width + model.kv_width) / t
        elementwise = kernels.memory_bound_s(replicated + rotary + mlp_bytes)

        self.gemm_forward = gemms
        self.attention_forward = attention
        self.wgrad = wgrad
        # MLA up-projections and the norms (recompute_modules mla_up_proj layernorm; memory.py): the
        # up-projection GEMMs again, and the layer's two RMSNorms and the latents' two (read, write).
        latent_width = 0.0 if model.mla is None else float((model.mla.q_lora_rank or 0) + model.mla.kv_lora_rank)
        self.up_projection_recompute = up_projection + kernels.memory_bound_s(
            8.0 * T * h / sp_div + 4.0 * T * latent_width)
        self.is_mla = model.mla is not None and kind != "linear"
        # PyTorch op-level selective checkpointing recomputes about half the weight GEMMs and the
        # element-wise ops (framework.selective_recompute == "op_sac"; memory.py).
        self.op_sac_recompute = 0.5 * gemms + elementwise
        self.forward_compute = gemms + attention + elementwise
        self.backward_compute = gemms_backward + attention_backward + 2.0 * elementwise

        # TP: two all-reduces forward and two backward of the h-wide activations; with sequence
        # parallelism each becomes an all-gather plus a reduce-scatter of the same total bytes.  A
        # group larger than an NVLink domain runs at the network's bandwidth (comm.Topology).  The
        # framework hides its overlap fraction for the link the group uses (TE userbuffers and async TP
        # only inside the NVLink domain), at most the GEMM time of the same pass.
        tp_bytes = 2.0 * T * h
        per_collective = np.where(
            geo.sp,
            comm.all_gather_s(tp_bytes, geo.tp_group, cluster) + comm.reduce_scatter_s(tp_bytes, geo.tp_group, cluster),
            comm.all_reduce_s(tp_bytes, geo.tp_group, cluster),
        )
        tp_overlap = np.where(geo.tp_group.crosses_network, framework.tp_overlap_network, framework.tp_overlap_nvlink)
        if framework.tp_overlap_needs_sp:
            tp_overlap = np.where(geo.sp, tp_overlap, 0.0)
        tp_pass = 2.0 * per_collective
        self.tp_forward = np.where(t > 1, exposed(tp_pass, tp_overlap, gemms), 0.0)
        self.tp_backward = np.where(t > 1, exposed(tp_pass, tp_overlap, gemms_backward), 0.0)
        # CP (ring attention): cp-1 exchanges of this rank's K and V blocks forward, and of
        # K, V and their gradients backward, hidden behind the attention compute up to cp_overlap;
        # across NVLink domains the exchange runs at the network's bandwidth.  (MLA rings the
        # expanded per-head K and V.)
        kv_bytes = 2.0 * T * core_kv_width / t
        ring_step = comm.point_to_point_s(kv_bytes, geo.cp_group, cluster)
        cp_forward = (geo.cp - 1.0) * ring_step
        self.cp_forward = exposed_behind(cp_forward, framework.cp_overlap, attention)
        self.cp_backward = exposed_behind(2.0 * cp_forward, framework.cp_overlap, attention_backward)
        # EP: dispatch and combine all-to-alls of top_k copies of each token, forward and backward,
        # on the links the EP group uses (_moe_comm); hidden as the schedule and framework allow.
        if self.moe:
            self.ep_forward, self.ep_backward = self._moe_comm(model, geo, cluster, workload, framework, plans, sp_div)
        else:
            self.ep_forward = np.zeros_like(t)
            self.ep_backward = np.zeros_like(t)

    def _moe_comm(self, model, geo, cluster, workload, framework, plans, sp_div):
        """Exposed EP (and expert-TP) communication of one MoE block, forward and backward.

        Dispatch and combine each move the rank's ``T/sp`` tokens times ``k`` (h wide): bf16, or the
        dispatch in fp8 where the framework quantizes before it (DeepSeek-V3 §3.3.3); backward the
        same in bf16.  The busiest rank receives ``moe_imbalance`` times the mean (with token dropping and
        padding, the capacity factor times it; capped at ep: workload.moe_expert_load).  Across NVLink
        domains a plain all-to-all sends every copy for a remote rank over the network; a DeepEP-style
        dispatcher (``ep_dispatch: dedup``) sends a token once per destination domain and forwards it
        on NVLink (expected_remote_domains).  With expert TP the received copies are all-gathered over
        the etp group and reduce-scattered back (Megatron-Core's dispatchers with
        expert_tensor_parallel_size > 1).

        Hiding: under DualPipe every chunk's communication runs beside the paired chunk's compute
        (DeepSeek-V3 §3.2.1), so all of it hides up to that compute; otherwise the framework's overlap
        share for the link, where its mechanism applies (Megatron-Core: pp == 1 or interleaved, no full
        recompute).  Hidden all-to-all time still costs the compute beside it the SMs its kernels take
        (OVERLAPPED_A2A_SM_SHARE).
        """
        moe = model.moe
        h = float(model.hidden_size)
        T = geo.tokens
        imbalance = workload.moe_expert_load(geo.ep)
        tokens_out = T / sp_div
        fp8 = np.asarray(plans.precision) == FP8
        dispatch_bytes = np.where(fp8 & framework.fp8_dispatch, FP8_DISPATCH_BYTES, 2.0)
        copies_bytes = tokens_out * moe.top_k * h * imbalance
        group = geo.ep_group
        # Token dropping with padding runs on the plain all-to-all dispatcher (Megatron-Core's flex
        # dispatcher refuses moe_pad_expert_input_to_capacity, TransformerConfig), without DeepEP's dedup.
        if framework.ep_dispatch == "dedup" and workload.moe_capacity_factor is None:
            share = expected_remote_domains(model, group.domains) / moe.top_k
        else:
            share = None

        def a2a(message):
            return np.where(geo.ep > 1, comm.all_to_all_s(message, group, cluster, share), 0.0)

        forward = a2a(dispatch_bytes * copies_bytes) + a2a(2.0 * copies_bytes)
        backward = 2.0 * a2a(2.0 * copies_bytes)
        # Expert TP: all-gather the received copies over etp ranks before the experts, reduce-scatter after.
        gathered = 2.0 * copies_bytes * geo.etp
        etp_pass = np.where(geo.etp > 1, comm.all_gather_s(gathered, geo.etp_group, cluster)
                            + comm.reduce_scatter_s(gathered, geo.etp_group, cluster), 0.0)
        forward = forward + etp_pass
        backward = backward + etp_pass

        recompute = np.asarray(plans.recompute)
        mechanism = np.ones_like(T, dtype=bool)
        if framework.ep_overlap_needs_interleaving:
            mechanism = ((geo.pp == 1) | (geo.vp > 1)) & (recompute != FULL)
        share_hidden = np.where(group.crosses_network, framework.ep_overlap_network, framework.ep_overlap_nvlink)
        share_hidden = np.where(mechanism, share_hidden, 0.0)
        # DualPipe: a forward chunk's communication beside a backward chunk's compute, and the reverse.
        dual = geo.dualpipe
        exposed_f = np.where(dual, np.maximum(0.0, forward - self.backward_compute),
                             exposed(forward, share_hidden, self.forward_compute))
        exposed_b = np.where(dual, np.maximum(0.0, backward - self.forward_compute),
                             exposed(backward, share_hidden, self.backward_compute))
        tax = OVERLAPPED_A2A_SM_SHARE / (1.0 - OVERLAPPED_A2A_SM_SHARE)
        exposed_f = exposed_f + tax * (forward - exposed_f)
        exposed_b = exposed_b + tax * (backward - exposed_b)
        return exposed_f, exposed_b


def step_time_parts(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, geo: Geometry, framework: Framework,
) -> dict[str, np.ndarray]:
    """Seconds per training step, split into the parts of :data:`TIME_PARTS` (they sum to the step)."""
    hw = cluster.hardware
    eff = hw.efficiency
    fw = framework
    kernels = Kernels(hw, plans.precision == FP8, fw.attention, fw.fp8_cast_bytes, fp4=plans.precision == FP4)
    recompute = np.asarray(plans.recompute)
    full, selective = recompute == FULL, recompute == SELECTIVE

    # Every block kind of the model (attention kind x dense/MoE, MTP blocks included), by its share
    # of the blocks; each stage is charged that mix (layer_mix).
    layers = [(share, _Layer(model, geo, kernels, cluster, workload, moe, fw, kind, plans))
              for share, kind, moe in layer_mix(model)]

    def mix(attr: str) -> np.ndarray:
        return sum(share * getattr(layer, attr) for share, layer in layers)

    fwd, bwd = mix("forward_compute"), mix("backward_compute")
    # Selective recomputation, as the framework emits it: Megatron's `--recompute-granularity
    # selective` re-runs the attention core (Korthikanti et al. 2022; Megatron-Core recompute_modules
    # [core_attn]) -- on a model with multi-head latent attention, the MLA up-projections and the
    # norms instead (recompute_modules mla_up_proj layernorm: DeepSeek-V3 §3.2.3; NVIDIA's DeepSeek-V3
    # recipes recompute mla_up_proj); PyTorch's op-level SAC (torchtitan `selective_ac_option = 'op'`, parallelize_llama.py
    # `_save_list`) keeps the attention kernel's output and every second matmul output and re-runs the
    # other matmuls and the element-wise ops.  A framework without it never gets such a plan (space.py).
    if fw.selective_recompute == "op_sac":
        selective_cost = mix("op_sac_recompute")
    elif fw.selective_recompute == "core_attention":
        selective_cost = sum(share * (layer.up_projection_recompute if layer.is_mla else layer.attention_forward)
                             for share, layer in layers)
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
    # Host-bound MoE blocks, each block kind and pass on its own.  A dropless dispatcher copies the
    # per-expert token counts to the host and waits for them (Megatron-Core's MoEAlltoAllTokenDispatcher
    # moves tokens_per_expert to the CPU and synchronises; DeepEP's normal kernels make the CPU wait for
    # the received-token count, DeepEP README), so the GPU drains at every MoE block and then waits on
    # the host as it issues the block's ops.  Published pairs of the same layout with and without the
    # sync show how much: Megatron-Bridge 25.09 (token-drop, fixed shapes, no sync) against 25.11
    # (dropless), Qwen3-30B-A3B EP8 micro-batch 1 on 8 B200, 18,066 against 9,299 tokens/s/GPU; on 16
    # H100, 10,494 against 5,275 (docs/performance-summary.md): where the issue time H is at least the
    # block's GPU time G, the dropless block costs about G + H, not max(G, H).  Where the GPU work is
    # longer, its queue refills behind the sync and less of H shows: we charge H * min(1, H/G), which
    # leaves GPU-heavy blocks (Mixtral's 8 large experts) within a few per cent of max(G, H) -- an
    # interpolation between the two measured regimes, not a derivation (docs/cost-model.md).  With tokens
    # dropped and padded to capacity the shapes are fixed, nothing waits on the host, and only what H
    # exceeds G by shows.
    def host_exposed(host: np.ndarray, gpu: np.ndarray) -> np.ndarray:
        if not workload.moe_host_sync:
            return np.maximum(0.0, host - gpu)
        return host * np.minimum(1.0, host / np.maximum(gpu, 1e-12))

    host_fwd = sum(share * host_exposed(layer.host_forward, layer.forward_compute + layer.tp_forward
                                        + layer.cp_forward + layer.ep_forward) for share, layer in layers)
    host_bwd = sum(share * host_exposed(layer.host_backward, layer.backward_compute + layer.tp_backward
                                        + layer.cp_backward + layer.ep_backward) for share, layer in layers)
    host_layer = comm_repeat * host_fwd + host_bwd

    n_layers = geo.layers_per_stage
    # What the data-parallel collectives (ZeRO-3 prefetch, bucketed gradient reduction) hide behind: the
    # stage's busy time on the other streams -- its compute, the TP, CP and EP collectives it waits on,
    # and the host stalls of dropless MoE blocks, during which the GPU idles but collectives already
    # issued run on.  Counting the stalls and the collectives keeps the step time monotonic: a heavier
    # expert load lengthens the compute and shortens the stalls it hides, and the window is their sum.
    stage_fwd = n_layers * (fwd + tp_f + cp_f + ep_f + host_fwd)
    stage_bwd = n_layers * (bwd + tp_b + cp_b + ep_b + host_bwd)

    # ZeRO-3 (FSDP full shard) gathers the stage's weights forward and again backward and
    # reduce-scatters its gradients, every micro-batch; prefetching hides them behind compute up
    # to the framework's zero3_overlap.  FSDP and ZeRO-3 issue one collective per layer (one FSDP
    # unit per transformer block, plus one for the embedding and output layer), so a collective's
    # ring latency counts once per layer; ZeRO-1/2 and DDP reduce bucketed gradients (counted as
    # one per stage).
    # DualPipe keeps two stages on every rank (one per direction): twice the parameters to reduce.
    copies = np.where(geo.dualpipe, 2.0, 1.0)
    dense_params = copies * n_layers * geo.dense_params_per_layer
    expert_params = copies * n_layers * geo.expert_params_per_layer
    # The fuller of the first stage (input embedding) and the last (output layer; with one
    # stage and tied embeddings there is only one matrix).
    edge_params = copies * np.maximum(geo.embedding_params, geo.output_params)
    zero = np.asarray(plans.zero)
    units = n_layers + 1.0
    nics = None
    # gradients are reduced in the precision the framework keeps them in: grad_bytes, or 2 for an fp16 plan where
    # the fp32 accumulation and reduction are bf16's alone (Megatron's accumulate_allreduce_grads_in_fp32)
    grad_comm_bytes = fw.grad_bytes_of(np.asarray(plans.precision) == FP16)
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
    # the shard (`reduce_per_microbatch`, DeepSpeed issue #2252); FSDP with sync off accumulates them
    # unsharded and reduce-scatters once per step (`accumulate_unsharded`, below; memory.py holds the
    # buffer).  FSDP2 as torchtitan drives it (`fsdp2_sync_unless_pp`) does the latter only under
    # torch.distributed.pipelining, which sets requires_gradient_sync and reshard_after_backward False
    # until the last backward (PipelineStage.backward_maybe_with_nosync).  Without PP, Trainer.train_step
    # (torchtitan/train.py) calls loss.backward() per micro-batch with sync on: every micro-batch
    # reduce-scatters, and FSDP2 reshards after it (FSDPParamGroup.reshard_after_backward, True by
    # default), so the next micro-batch's forward all-gathers the weights again.
    fsdp2_unpiped = (fw.zero2 == "fsdp2_sync_unless_pp") & (geo.pp == 1)
    zero2_each = (zero == 2) & (geo.microbatches > 1)
    per_microbatch_rs = zero2_each & ((fw.zero2 == "reduce_per_microbatch") | fsdp2_unpiped)
    regather = zero2_each & fsdp2_unpiped
    zero2_mb = (np.where(per_microbatch_rs, exposed_behind(scatter_once, fw.dp_overlap, stage_bwd), 0.0)
                + np.where(regather, exposed_behind(gather_once_s, fw.dp_overlap, stage_fwd), 0.0))
    dp_per_microbatch = np.where(zero >= 3, zero3_mb, zero2_mb)

    # Pipeline sends: the h-wide activation forward and its gradient backward, per chunk boundary.
    # Megatron-LM splits the message over the TP ranks and all-gathers it over NVLink on the
    # other side (the scatter/gather optimisation, Narayanan et al. 2021 §4.1; implicit with
    # sequence parallelism), so each rank sends 1/tp of it.
    # DualPipe overlaps them with the paired chunk's compute (DeepSeek-V3 §3.2.1).
    pp_bytes = 2.0 * geo.tokens * model.hidden_size / geo.tp
    pp_per_microbatch = np.where(
        (geo.pp > 1) & ~geo.dualpipe,
        2.0 * geo.vp * comm.point_to_point_s(pp_bytes, geo.pp_pair, cluster) * (1.0 - fw.pp_overlap),
        0.0,
    )

    # Logits and loss on the last stage: a GEMM forward, two backward, plus softmax traffic.  Each MTP
    # module adds its projection of [h; embedding] (2h -> h) and a second pass through the shared head
    # (its block is one of the stage's blocks, layer_mix).
    logits_gemm = kernels.gemm_s(geo.tokens, model.vocab_size / geo.tp, float(model.hidden_size))
    logits = 3.0 * logits_gemm + kernels.memory_bound_s(16.0 * geo.tokens * model.vocab_size / geo.tp)
    if model.mtp_layers:
        eh_forward, eh_backward = kernels.linear_s(geo.tokens, float(model.hidden_size), 2.0 * model.hidden_size)
        logits = (1.0 + model.mtp_layers) * logits + model.mtp_layers * (eh_forward + eh_backward)

    def stage(layers: np.ndarray) -> dict[str, np.ndarray]:
        return {
            "compute": layers * (fwd + bwd),
            "recompute": layers * recompute_per_layer,
            "tp_comm": layers * tp_layer,
            "cp_comm": layers * cp_layer,
            "ep_comm": layers * ep_layer,
            "host_bound": layers * host_layer,
            "dp_comm": dp_per_microbatch,
            "pp_comm": pp_per_microbatch,
        }

    per_mb = stage(n_layers)
    body = sum(per_mb.values())  # one micro-batch on the fullest stage, without the logits
    # The last stage also computes the logits and loss (and the MTP heads), so the slowest of the
    # fullest stage and the last one sets the pace: with uneven stages the last rank holds the layers
    # the others leave (Megatron-Core --decoder-last-pipeline-num-layers, torchtitan's split points),
    # with one stage it holds them all.
    last = stage(geo.last_layers(fw))
    last["compute"] = last["compute"] + logits
    last_binds = sum(last.values()) >= body
    per_mb = {key: np.where(last_binds, last[key], per_mb[key]) for key in per_mb}
    m = geo.microbatches
    parts = {key: m * value for key, value in per_mb.items()}
    # Fill and drain: the passes beyond the m of this stage (pipeline_passes), shortened by interleaving.
    # DualPipe (deepseek-ai/DualPipe README, DeepSeek-V3 Table 2): (p/2 - 1)(F&B + B - 3W), with F&B
    # the paired forward and backward chunks (their compute adds up; the communication hides) and W the
    # weight-gradient part of B, which the schedule defers into the bubbles.
    chunk_f = n_layers * fwd
    chunk_b = n_layers * bwd + n_layers * recompute_per_layer
    chunk_w = n_layers * mix("wgrad")
    dual_bubble = np.maximum(geo.pp / 2.0 - 1.0, 0.0) * np.maximum(chunk_f + 2.0 * chunk_b - 3.0 * chunk_w, 0.0)
    parts["pipeline_bubble"] = np.where(geo.dualpipe, dual_bubble, (pipeline_passes(m, geo.pp, geo.vp) - m) * body)

    # Once per step: gradient reduction not hidden behind the last micro-batch's backward,
    # and (ZeRO 0-2) the all-gather of updated weights not hidden behind the next forward.
    dense_grads = grad_comm_bytes * (dense_params + edge_params)
    once_zero2 = np.where(per_microbatch_rs, 0.0, scatter_once)
    reduce_once = np.where(
        zero == 0,
        comm.all_reduce_s(dense_grads, geo.dp_group, cluster)
        + comm.all_reduce_s(grad_comm_bytes * expert_params, geo.expert_dp_group, cluster),
        np.where(zero == 1, scatter_once, np.where(zero == 2, once_zero2, 0.0)),
    )
    gather_once = np.where((zero == 1) | ((zero == 2) & ~regather), gather_once_s, 0.0)
    parts["dp_comm"] = (
        parts["dp_comm"]
        + exposed_behind(reduce_once, fw.dp_overlap, stage_bwd)
        + exposed_behind(gather_once, fw.dp_overlap, stage_fwd)
    )

    # Optimizer step on this GPU's shard (ZeRO >= 1 shards it over dp*cp).
    shard_dense = np.where(zero >= 1, geo.dense_shard, 1.0)
    shard_expert = np.where(zero >= 1, geo.expert_shard, 1.0)
    stage_params = dense_params + edge_params
    # DualPipe's two copies of a stage shard their optimizer state over both (2x the shard group).
    shard_copies = np.where(zero >= 1, copies, 1.0)
    local_params = (stage_params / shard_dense + expert_params / shard_expert) / shard_copies
    offload = np.asarray(plans.offload) == 1
    on_gpu = kernels.memory_bound_s(OPTIMIZER_BYTES_PER_PARAM * local_params)
    on_host = local_params / hw.cpu_optimizer_params_per_s
    host_traffic = HOST_BYTES_PER_PARAM * local_params / (hw.host_link_bandwidth_gb_per_s * 1e9)
    parts["optimizer"] = np.where(offload, on_host, on_gpu)
    parts["offload"] = np.where(offload, host_traffic, 0.0)
    parts["overhead"] = np.full_like(m, eff.step_overhead_s)
    return {key: parts[key] for key in TIME_PARTS}
