"""The serving cost model: ``estimate_serving(model, cluster, workload, plans, params, engine=...)``.

A pure function, vectorised with numpy (docs/serving.md, "What the model assumes", has the formulas
and their sources).  The same core (``solve``) evaluates many plans of one model (search, predict)
and many measured rows of many models and GPUs at once (validate, calibrate): everything it reads
is an array that broadcasts over rows.

Per engine, in steady state:

* **Decode round** (``decode_step_s``): every attention-DP rank advances its ``b`` sequences by one
  token.  Roofline of the weights streamed (only the experts the round's tokens touch: with uniform
  top-k routing the touched share is ``1 - (1 - k/E)^T``; with expert parallelism the round waits
  for the EP group that drew the most) against the GEMM FLOPs at their precision's peak; the
  attention's KV/state bytes against its FLOPs; two TP all-reduces per layer; for attention DP with
  MoE a dispatch and a combine all-to-all per MoE layer, its copies split between NVLink (in a node or
  an NVL72 rack) and the network by where they go (``dispatch_copies_by_link``); fixed costs per step,
  per layer, per MoE layer and per running sequence.  Pipeline stages run ``pp`` micro-batches.
* **Prefill** (``prefill_s``): a prompt's GEMMs (routed experts at a grouped-GEMM efficiency),
  causal attention (bounded by sliding windows and DSA's top-k), the weights streamed once per chunk
  of the engine's token budget (chunked prefill), collectives and fixed costs per chunk.
* **Load.**  A closed loop of ``C`` clients (``--concurrency``), an open loop of ``λ`` requests/s
  (``--request-rate``), or the engine full (max-throughput).  Little's law on the decode phase gives
  the request rate; prefill work steals engine time from decode in an aggregated engine
  (``TPOT = t_dec / (1 - ρ)``, with ρ the other users' share of a user's decoding time in a closed loop, and
  at most one token budget's prefill a token where prefill chunks ride in decode steps); prefill waits in a
  G/D/c queue (Sakasegawa's approximation, M/D/1 of DistServe for one server) and the scheduler's pick-up
  delay; requests beyond the KV cache or the engine's batch limit wait for a slot.  A share of a closed loop
  runs in synchronised waves instead (clients of equal lengths finish and return together): a wave's prefill
  splits between its prompts' TTFT and their TPOT.
* **Disaggregated** plans: prefill engines and decode engines, each with their own layout; TPOT is the
  decode pool's round; TTFT adds the KV hand-off over the link between them.

Memory comes from the engine's own budget rule (``engines.memory_budget``): the KV pool, and from it
the batch the engine can hold.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields
from typing import Any, Mapping

import numpy as np

from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import ServeWorkload
from . import engines as E
from .arch import (
    KV_BYTES,
    WEIGHT_BYTES,
    class_formats,
    cluster_scalars,
    model_scalars,
    precision_arrays,
)
from .plan import KV_DTYPES, WEIGHTS, ServePlanBatch

GIB = E.GIB
ACTIVATION_BYTES = 2.0  # bf16 activations on the wire (TP all-reduce, PP sends)


@dataclass(frozen=True)
class ServingParams:
    """The serving model's free parameters: few, physical, bounded (``SERVING_PARAM_BOUNDS``).

    Fitted per engine (``calibrated.py``; ``autotune calibrate`` on a serving CSV).  A field may hold
    a numpy array (one value per row) when many rows of several engines are evaluated at once.
    """

    # kernels and hardware (shared by the engines of one calibration)
    gemm: float = 0.75  # share of the GPU's measured GEMM ceiling (reference_efficiency, MAMF) reached by prefill GEMMs
    attention: float = 0.50  # fraction of the bf16 peak reached by prefill attention (flash kernels)
    kv_bandwidth: float = 0.70  # fraction of HBM bandwidth reading the paged KV cache / recurrent state
    grouped_gemm: float = 0.50  # MoE expert (grouped) GEMMs in prefill, relative to gemm
    fp4_gemm: float = 0.70  # FP4 GEMMs relative to gemm (FP4 peaks are hard to reach)
    weight_only: float = 0.80  # streaming rate of 4-bit weight-only (dequantising) GEMMs relative to native
    link_bandwidth: float = 0.75  # fraction of NVLink / NIC bandwidth reached by collectives
    allreduce_us: float = 10.0  # latency of one all-reduce
    alltoall_us: float = 20.0  # latency of one all-to-all (EP dispatch or combine)
    moe_layer_us: float = 10.0  # fixed time per MoE layer per step (routing, permute, EP sync)
    prompt_token_us: float = 2.0  # CPU time per prompt token before prefill (tokenising, input processing)
    arrival_cv2: float = 1.0  # squared coefficient of variation of closed-loop prefill arrivals (1: Poisson)
    kv_handoff_ms: float = 20.0  # disagg: fixed prefill -> decode hand-off per request
    transfer_poll_us: float = 0.0  # disagg: per decode step, the decode engine's poll of its incoming KV transfers
    older_overhead: float = 1.0  # fixed per-step / per-layer costs before Blackwell, relative to Blackwell
    kv_reserve: float = 0.6  # share of a request's output tokens the scheduler reserves KV for at admission
    # the engine
    weight_bandwidth: float = 0.80  # fraction of HBM bandwidth streaming weights in decode
    step_us: float = 300.0  # fixed time per engine step (scheduler, sampling, launch, sync)
    layer_us: float = 20.0  # fixed time per layer per step (kernel latency floor under CUDA graphs)
    seq_us: float = 10.0  # time per running sequence per step (sampling, detokenising, streaming)
    seq_layer_us: float = 0.0  # time per running sequence per attention layer (the decode attention kernel's per-sequence floor)
    request_ms: float = 20.0  # fixed TTFT per request (HTTP, tokeniser, scheduling, first chunk)
    admission_steps: float = 2.0  # scheduler pick-up delay, in decode steps of the running batch
    sync_share: float = 0.1  # share of closed-loop arrivals that come in synchronised waves of all C clients
    # an engine property (set from the release, not fitted): share of the re-reads of a KV head by the
    # other query heads of its group that reach HBM (TensorRT-LLM <= 0.9: 0.25; modern kernels: 0)
    kv_reread_fraction: float = 0.0

    def replace(self, **changes: Any) -> "ServingParams":
        return dataclasses.replace(self, **changes)

    def as_dict(self) -> dict[str, float]:
        return {f.name: float(getattr(self, f.name)) for f in fields(self)}


SERVING_PARAM_FIELDS = tuple(f.name for f in fields(ServingParams))
# The meaning of the parameters, recorded beside them in plans.json files and calibration files: 2 (2026-12) reads
# gemm as a share of the GPU's measured GEMM ceiling (1: of its peak) and bounds weight and KV streaming at 0.91.
SERVING_MODEL_VERSION = 2
# (low, high) of every parameter: what is physically possible.  The kernel fractions stop at what the hardware
# reaches: gemm at the GPU's measured GEMM ceiling (arch.gpu_scalars), weight and KV streaming at 0.91 of the
# datasheet bandwidth, the rate a one-token GEMM streams a 70B layer's weights at on an H200 (benchmarks/
# gpu_kernels.py, docs/serving.md; assumed for the other GPUs, whose profiles carry no such measurement).
SERVING_PARAM_BOUNDS: Mapping[str, tuple[float, float]] = {
    "gemm": (0.05, 1.0), "attention": (0.05, 0.75), "kv_bandwidth": (0.2, 0.91), "grouped_gemm": (0.1, 1.0),
    "fp4_gemm": (0.2, 1.0), "weight_only": (0.3, 1.0), "link_bandwidth": (0.3, 1.0), "allreduce_us": (1.0, 60.0),
    "alltoall_us": (1.0, 150.0), "moe_layer_us": (0.0, 200.0), "prompt_token_us": (0.0, 20.0),
    "arrival_cv2": (0.0, 8.0), "kv_handoff_ms": (0.0, 1000.0), "transfer_poll_us": (0.0, 5000.0),
    "older_overhead": (0.5, 2.0), "kv_reserve": (0.0, 1.0),
    "weight_bandwidth": (0.3, 0.91), "step_us": (0.0, 20000.0), "layer_us": (0.0, 200.0), "seq_us": (0.0, 300.0),
    "request_ms": (0.0, 300.0), "admission_steps": (0.0, 20.0), "sync_share": (0.0, 1.0), "seq_layer_us": (0.0, 5.0),
    "kv_reread_fraction": (0.0, 1.0),
}
# Fitted per engine; the others are shared by every engine of one calibration.
ENGINE_PARAMS = ("weight_bandwidth", "step_us", "layer_us", "seq_us", "request_ms", "admission_steps", "sync_share",
                 "seq_layer_us", "transfer_poll_us")


def weight_bytes_per_param(weights: str) -> float:
    return WEIGHT_BYTES[weights]


# --- building blocks (numpy, broadcasting over rows) -----------------------------------------------

def _link_bw(g, group):
    """Bytes/s per GPU of the slowest link a group of ``group`` GPUs crosses: NVLink inside a node,
    the scale-up fabric inside an NVLink domain (NVL72), else the network."""
    return np.where(group <= g["node"], g["nvlink"], np.where(group <= g["domain"], g["scale_up"], g["net"]))


def _allreduce_s(nbytes, group, g, p):
    t = p.allreduce_us * 1e-6 + 2.0 * (group - 1.0) / np.maximum(group, 1.0) * nbytes / (_link_bw(g, group) * p.link_bandwidth)
    return np.where(group > 1, t, 0.0)


def _alltoall_s(nbytes, group, g, p):
    """An all-to-all of ``nbytes`` per GPU over ``group`` GPUs, every byte at the slowest link's rate (the
    gathering MoE path: an all-gather and reduce-scatter over NCCL runs at the ring's slowest hop)."""
    t = p.alltoall_us * 1e-6 + (group - 1.0) / np.maximum(group, 1.0) * nbytes / (_link_bw(g, group) * p.link_bandwidth)
    return np.where(group > 1, t, 0.0)


def dispatch_copies(a, G, ep):
    """Copies of a token the MoE dispatch sends, over an engine of ``G`` GPUs whose experts lie on ``ep`` ranks of
    ``G/ep`` GPUs each (expert tensor parallelism inside a rank).  The dispatch sends a token once to each rank that
    holds one of its top-k experts (DeepEP and TensorRT-LLM's all-to-all deduplicate by rank), E[ranks] =
    ep (1 - (1 - 1/ep)^k) for experts spread evenly, and every GPU of such a rank needs it: G (1 - (1 - 1/ep)^k)
    copies.  ep = G sends about k (a little less: two experts on one rank share a copy); ep = 1 (each expert split
    over all G GPUs) gathers every token to every GPU, G copies: twice the volume of EP 16 for DeepSeek's top-8."""
    ep = np.maximum(np.asarray(ep, float), 1.0)
    return G * (1.0 - np.power(1.0 - 1.0 / ep, np.maximum(a["topk"], 1.0)))


def dispatch_copies_by_link(a, G, ep, island, *, per_island):
    """(copies over the NVLink island, copies over the NIC) one GPU sends of each of its tokens in a deduplicating
    MoE dispatch (``dispatch_copies``) over ``G`` GPUs in islands of ``island`` GPUs (a node; an NVL72 rack).

    A GPU of the engine needs the token with probability c = 1 - (1 - 1/ep)^k (its rank holds one of the token's
    top-k experts).  Of the G - 1 other GPUs, island - 1 share the sender's island (NVLink) and G - island do not.
    DeepEP's low-latency kernels (decode) write each remote GPU's copy over RDMA: (G - island) c on the NIC.  Its
    normal kernels (prefill; ``per_island``) send one copy per remote island that holds any of the token's ranks,
    to the GPU of the sender's local index there, which forwards it over NVLink (DeepEP README, "normal kernels":
    NVLink-to-RDMA forwarding; DeepSeek-V3 tech report section 3.2.2, one IB copy per node): the island is hit
    with probability 1 - (1 - max(island, G/ep)/G)^k (experts spread evenly; a rank wider than an island takes
    every island it spans), and each GPU's NVLink then carries its own island's copies plus the ones it forwards,
    (island - 1) c for each of the G/island islands.  One island (G <= island) gives (G - 1) c on NVLink and
    nothing on the NIC: the whole-engine all-to-all it always was."""
    ep = np.maximum(np.asarray(ep, float), 1.0)
    k = np.maximum(a["topk"], 1.0)
    G = np.maximum(np.asarray(G, float), 1.0)
    island = np.clip(island, 1.0, G)
    islands = G / island
    hit_island = 1.0 - np.power(1.0 - np.maximum(island, G / ep) / G, k)
    # the copies to the other GPUs of one's own island (per island forwarded, on every island), and to remote GPUs
    nvlink = dispatch_copies(a, island - 1.0, ep) * np.where(per_island, islands, 1.0)
    nic = np.where(per_island, (islands - 1.0) * hit_island, dispatch_copies(a, G - island, ep))
    return nvlink, nic


def _moe_alltoall_s(tokens, a, G, ep, gather, g, p, *, per_island):
    """Seconds of one MoE all-to-all (a dispatch or a combine) of ``tokens`` tokens a GPU sends over an engine of
    ``G`` GPUs with ``ep`` expert ranks.

    A gathering backend (``gather`` 1: SGLang's default below ep = tp*dp) sends every token to every GPU in bf16
    both ways, an all-gather at the slowest link's rate (``_alltoall_s``).  DeepEP sends a token once per rank
    holding its experts, in fp8, and brings it back in bf16 (1.5 bytes an element over the two): its copies split
    between the NVLink island (a node; the whole rack on NVL72) and the NIC (``dispatch_copies_by_link``), and the
    kernels move the two at once (NVLink forwarding overlaps the RDMA sends), so the slower of the two parts sets
    the time.  ``per_island``: DeepEP's normal kernels (prefill), one RDMA copy per remote island; else its
    low-latency kernels (decode), one per remote GPU."""
    gathers = np.asarray(gather) > 0
    t_gather = _alltoall_s(tokens * G * a["h"] * ACTIVATION_BYTES, G, g, p)
    island = np.minimum(G, g["domain"])  # NVLink joins a scale-up domain (a node on HGX, 72 GPUs on NVL72)
    nvlink_copies, nic_copies = dispatch_copies_by_link(a, G, ep, island, per_island=per_island)
    token_bytes = tokens * a["h"] * 1.5
    t_nvlink = token_bytes * nvlink_copies / (_link_bw(g, island) * p.link_bandwidth)
    t_nic = token_bytes * nic_copies / (g["net"] * p.link_bandwidth)
    t_dedup = np.where(G > 1, p.alltoall_us * 1e-6 + np.maximum(t_nvlink, t_nic), 0.0)
    return np.where(gathers, t_gather, t_dedup)


def experts_touched(tokens, a):
    """Expected share of the E experts that at least one of ``tokens`` tokens (top-k each) routes to."""
    E_, k = a["E"], a["topk"]
    miss = np.where(E_ > 0, 1.0 - k / np.maximum(E_, 1.0), 0.0)
    return np.where(E_ > 0, 1.0 - np.power(miss, np.maximum(tokens, 0.0)), 0.0)


def _max_normal_z(n):
    """Expected maximum of ``n`` independent standard normal draws (Blom's approximation); 0 for n <= 1."""
    from scipy.special import ndtri  # the standard normal quantile, vectorised (no sort of 10^5 rows for a few ep)

    n = np.asarray(n, float)
    with np.errstate(invalid="ignore", divide="ignore"):
        z = ndtri((n - 0.375) / (n + 0.25))
    return np.where(n > 1.0, z, 0.0)


def experts_touched_busiest(tokens, a, ep):
    """Share of its own experts that the busiest of ``ep`` expert-parallel groups streams in a decode round.
    Each group holds E/ep experts; how many of them the round's tokens touch is binomial around
    ``experts_touched``, and the round waits for the group that drew the most (normal approximation of the
    maximum of ``ep`` groups).  With the experts split by TP instead (ep 1) every GPU streams the mean."""
    phi = experts_touched(tokens, a)
    n = np.maximum(E.physical_experts(a["E"], ep) / np.maximum(ep, 1.0), 1.0)
    return np.minimum(phi + _max_normal_z(ep) * np.sqrt(phi * (1.0 - phi) / n), 1.0)


def _overhead_factor(g, p):
    return np.where(g["blackwell"] > 0, 1.0, p.older_overhead)


def decode_step_s(a, q, g, p, b, ctx, tp, pp, dp, ep, gather=0.0, per_island=0.0):
    """Seconds of one decode round of an engine: each of its ``dp`` ranks advances ``b`` sequences
    (mean context ``ctx``) by one token, through ``pp`` stages.  ``gather`` 1: the MoE dispatch sends every token to
    every GPU (``engines.EngineDefaults.gathers``), not once per rank holding its experts; ``per_island`` 1: DeepEP's
    normal kernels (``engines.EngineDefaults.decode_dispatch_per_island``), else its low-latency ones."""
    G = tp * dp
    micro = np.clip(b, 1.0, pp)
    bm = b / micro
    T = bm * dp  # tokens a MoE layer of a stage sees per micro-batch
    wo = lambda c: np.where(q[f"wo_{c}"] > 0, 1.0 / p.weight_only, 1.0)  # noqa: E731
    w_non = (a["P_attn"] * q["b_attn"] * wo("attn") + (a["P_dense"] + a["P_shared"]) * q["b_mlp"] * wo("mlp")
             + a["P_head"] * 2.0) / (tp * pp)
    w_exp = (a["n_moe"] * E.physical_experts(a["E"], ep) * a["P_expert"] * q["b_exp"] * wo("exp")
             * experts_touched_busiest(T, a, ep) / (G * pp))
    t_w = (w_non + w_exp) / (g["hbm"] * p.weight_bandwidth)
    eff = lambda c: p.gemm * np.where(q[f"fp4_{c}"] > 0, p.fp4_gemm, 1.0)  # noqa: E731
    flops = (2.0 * bm * a["P_attn"] / (tp * pp) / (q["pk_attn"] * eff("attn"))
             + 2.0 * bm * (a["P_dense"] + a["P_shared"]) / (tp * pp) / (q["pk_mlp"] * eff("mlp"))
             + 2.0 * T * a["topk"] * a["n_moe"] * a["P_expert"] / (G * pp) / (q["pk_exp"] * eff("exp"))
             + 2.0 * bm * a["P_head"] / (tp * pp) / (g["bf16"] * g["gemm_ceiling"] * p.gemm))
    t_gemm = np.maximum(t_w, flops)
    # attention: KV (or recurrent state) bytes against attention FLOPs
    heads = np.maximum(a["n_kv_heads"] / tp, 1.0) / np.maximum(a["n_kv_heads"], 1.0)
    share = np.where(a["kv_split"] > 0, heads, 1.0)
    group = np.maximum(a["n_heads"] / np.maximum(a["n_kv_heads"], 1.0), 1.0)
    reread = np.where(a["kv_split"] > 0, 1.0 + (group - 1.0) * p.kv_reread_fraction, 1.0)
    kv_layer = a["kv_elems"] * q["kv_b"] * share * reread
    ctx_full = np.where(a["dsa_topk"] > 0, np.minimum(ctx, np.maximum(a["dsa_topk"], 1.0)), ctx)
    ctx_swa = np.minimum(ctx, a["window"])
    kv_read = bm * (a["n_full"] * kv_layer * ctx_full + a["n_swa"] * kv_layer * ctx_swa
                    + a["n_full"] * a["idx_elems"] * ctx) / pp
    state = bm * a["n_lin"] * a["lin_state_bytes"] * 2.0 / (tp * pp)
    attn_fl = bm * (a["dec_attn_flops"] * (a["n_full"] * ctx_full + a["n_swa"] * ctx_swa)
                    + a["idx_flops"] * a["n_full"] * ctx + a["lin_flops"] * a["n_lin"]) / (tp * pp)
    t_attn = np.maximum((kv_read + state) / (g["hbm"] * p.kv_bandwidth), attn_fl / (g["bf16"] * p.attention))
    # communication: TP all-reduces (2 per layer), attention-DP dispatch + combine per MoE layer.  Each
    # token of an attention-DP rank is dispatched once: with attention TP inside the rank, its tp GPUs
    # each send a 1/tp slice (SGLang reduce-scatters the attention output to its "scattered" mode before
    # the DeepEP dispatch, sglang/srt/layers/communicator.py); TensorRT-LLM's attention DP has tp 1; vLLM's
    # DP x TP with expert parallelism is taken to split its tokens the same way (not checked against its code).
    t_ar = 2.0 * a["L"] / pp * _allreduce_s(bm * a["h"] * ACTIVATION_BYTES, tp, g, p)
    t_a2a = np.where(dp > 1, a["n_moe"] / pp * 2.0 * _moe_alltoall_s(bm / tp, a, G, ep, gather, g, p,
                                                                            per_island=np.asarray(per_island) > 0),
                     0.0)
    f = _overhead_factor(g, p)
    attn_layers = a["n_full"] + a["n_swa"] + a["n_lin"]
    stage = t_gemm + t_attn + t_ar + t_a2a + (p.layer_us * a["L"] + p.moe_layer_us * a["n_moe"]
                                              + p.seq_layer_us * bm * attn_layers) / pp * 1e-6 * f
    send = np.where(pp > 1, (pp - 1.0) * (g["nvlink_lat"] + bm * a["h"] * ACTIVATION_BYTES / g["nvlink"]), 0.0)
    # the scheduler runs once per micro-batch in flight (one step each); sampling once per sequence
    return pp * stage + send + (p.step_us * micro + p.seq_us * b) * 1e-6 * f


def prefill_s(a, q, g, p, n, tp, pp, dp, ep, chunk, *, seqs=1.0, moe_share=1.0, gather=0.0):
    """Seconds to prefill ``n`` prompt tokens (``seqs`` prompts of ``n/seqs`` tokens) on one attention
    rank (``tp`` GPUs per stage, stages in turn); routed experts run on the engine's ``tp*dp`` GPUs,
    ``moe_share`` times slower when the other attention-DP ranks prefill at the same time; ``gather`` as in
    ``decode_step_s``."""
    G = tp * dp
    eff = lambda c: p.gemm * np.where(q[f"fp4_{c}"] > 0, p.fp4_gemm, 1.0)  # noqa: E731
    t_lin = (2.0 * n * a["P_attn"] / tp / (q["pk_attn"] * eff("attn"))
             + 2.0 * n * (a["P_dense"] + a["P_shared"]) / tp / (q["pk_mlp"] * eff("mlp"))
             + 2.0 * np.minimum(n, seqs) * a["P_head"] / tp / (g["bf16"] * g["gemm_ceiling"] * p.gemm))  # last tokens
    t_exp = 2.0 * n * a["topk"] * a["n_moe"] * a["P_expert"] / G / (q["pk_exp"] * eff("exp") * p.grouped_gemm) * moe_share
    L1 = n / seqs  # tokens of one prompt
    pairs_full = np.where(a["dsa_topk"] > 0,
                          np.where(L1 <= a["dsa_topk"], L1 * L1 / 2.0, a["dsa_topk"] * (L1 - a["dsa_topk"] / 2.0)),
                          L1 * L1 / 2.0)
    pairs_swa = np.where(L1 <= a["window"], L1 * L1 / 2.0, a["window"] * (L1 - a["window"] / 2.0))
    attn_fl = seqs * (a["pf_attn_flops"] * (a["n_full"] * pairs_full + a["n_swa"] * pairs_swa)
                      + a["idx_flops"] * a["n_full"] * L1 * L1 / 2.0) / tp + a["lin_flops"] * a["n_lin"] * n * 4.0 / tp
    t_att = attn_fl / (g["bf16"] * p.attention)
    chunks = np.ceil(n / chunk)
    w = E.weight_bytes_per_gpu(a, q, tp, 1.0, dp, ep)  # every stage's weights, stages in turn
    t_w = chunks * w / (g["hbm"] * p.weight_bandwidth)
    t_comp = np.maximum(t_lin + t_exp, t_w) + t_att
    t_ar = 2.0 * a["L"] * _allreduce_s(n * a["h"] * ACTIVATION_BYTES, tp, g, p)
    t_a2a = np.where(dp > 1, a["n_moe"] * 2.0 * _moe_alltoall_s(n / tp, a, G, ep, gather, g, p, per_island=True), 0.0)
    send = np.where(pp > 1, (pp - 1.0) * (g["nvlink_lat"] + n * a["h"] * ACTIVATION_BYTES / g["nvlink"]), 0.0)
    t_fix = chunks * (p.step_us + p.layer_us * a["L"] + p.moe_layer_us * a["n_moe"]) * 1e-6 * _overhead_factor(g, p)
    return t_comp + t_ar + t_a2a + send + t_fix


def adp_balance_wait_s(lam, dp, timeout_s):
    """Mean wait of a context request under TensorRT-LLM's attention-DP balance (engines.EngineDefaults):
    while every rank decodes, contexts are held until each of the ``dp`` ranks has one, or until the
    balance's counter reaches ``timeout_s``.  The counter counts every iteration in which not every rank has a
    context, whether any is pending or not, and restarts at each release and at each timeout, so it runs in
    cycles of at most ``timeout_s`` and a lone context waits for the end of the current one.  Poisson arrivals
    at ``lam`` per second, one per rank in turn.  Over a cycle (X = lam * timeout_s; P and Q the regularised
    lower and upper incomplete gamma functions): waiting time  E[W] = (X^2/2 Q(dp-1, X) + dp(dp-1)/2
    P(dp+1, X)) / lam  (the timed-out cycles, then those the dp-th arrival ends), requests
    E[N] = X Q(dp-1, X) + dp (1 - Q(dp, X))  (= E[min(K, dp)], K ~ Poisson(X)); the mean wait is E[W]/E[N],
    which tends to (dp-1)/(2 lam) when the ranks fill before the timeout and to timeout_s/2 when requests are
    rare."""
    from scipy.special import gammainc, gammaincc

    lam = np.maximum(np.asarray(lam, float), 1e-12)
    m = np.maximum(np.asarray(dp, float), 2.0)
    X = np.maximum(lam * np.maximum(np.asarray(timeout_s, float), 0.0), 1e-12)
    EW = (0.5 * X * X * gammaincc(m - 1.0, X) + 0.5 * m * (m - 1.0) * gammainc(m + 1.0, X)) / lam
    EN = X * gammaincc(m - 1.0, X) + m * (1.0 - gammaincc(m, X))
    return np.where(np.asarray(dp, float) > 1.0, EW / EN, 0.0)


def _wq_gdc(S, rho, c, ca2):
    """Mean wait in a G/D/c queue (Sakasegawa 1977 / Allen-Cunneen): ca2/2 * rho^(sqrt(2(c+1))-1) / (c(1-rho)) * S.
    c = 1 and ca2 = 1 give M/D/1's rho*S/(2(1-rho)) (DistServe's prefill queue)."""
    rho = np.clip(rho, 0.0, 0.999999)
    return 0.5 * ca2 * np.power(rho, np.sqrt(2.0 * (c + 1.0)) - 1.0) / (c * (1.0 - rho)) * S


# --- the core ----------------------------------------------------------------------------------------

LOAD_CONCURRENCY, LOAD_RATE, LOAD_FULL = 0, 1, 2


@dataclass
class Rows:
    """Everything the core reads, as arrays (or scalars) that broadcast over rows.

    ``a`` model quantities (arch.model_scalars), ``g`` GPU quantities (arch.gpu_scalars), ``q``
    weight formats and KV bytes (arch.precision_arrays), layout columns (``disagg`` 0/1, prefill
    pool ``p_*`` and decode pool ``d_*``: workers, tp, pp, dp, ep), the load (``load`` kind,
    ``I``, ``O``, ``C`` clients or ``lam`` requests/s, both per replica), and the engine's
    settings (``chunk`` tokens per prefill step, ``mixed`` prefill in decode steps, ``limit``
    sequences per decode rank the engine admits, ``kv_pool`` bytes per decode GPU).
    """

    a: Mapping[str, Any]
    g: Mapping[str, Any]
    q: Mapping[str, Any]
    disagg: Any
    p_workers: Any
    p_tp: Any
    p_pp: Any
    p_dp: Any
    p_ep: Any
    d_workers: Any
    d_tp: Any
    d_pp: Any
    d_dp: Any
    d_ep: Any
    load: Any
    I: Any  # noqa: E741
    O: Any  # noqa: E741
    C: Any
    lam: Any
    chunk: Any
    mixed: Any
    limit: Any
    kv_pool: Any
    lockstep: Any  # attention-DP ranks step in lockstep (engines.EngineDefaults.adp_lockstep), 0/1
    balance_iters: Any  # attention-DP balance timeout, iterations (engines.EngineDefaults.adp_balance_timeout_iters); 0: none
    n: int
    p_gather: Any = 0.0  # 1: the pool's MoE dispatch gathers every token to every GPU (engines.EngineDefaults.gathers)
    d_gather: Any = 0.0
    d_per_island: Any = 0.0  # 1: the decode dispatch runs DeepEP's normal kernels (EngineDefaults.decode_dispatch_per_island)
    swa_ratio: Any = 0.0  # the engine's sliding pool over its full pool (engines.swa_pool_ratio); 0: window-sized pages


def kv_seq_bytes(r: Rows, tokens):
    """Cache bytes one sequence of ``tokens`` tokens holds on one GPU of a decode rank."""
    return E.kv_bytes_per_sequence(r.a, r.q["kv_b"], r.d_tp, r.d_pp, tokens)


def kv_pool_seq_bytes(r: Rows, tokens):
    """Bytes of a decode GPU's KV pool one sequence of ``tokens`` tokens takes under the engine's pool layout
    (``engines.kv_pool_bytes_per_sequence``): what admission divides the pool by."""
    return E.kv_pool_bytes_per_sequence(r.a, r.q["kv_b"], r.d_tp, r.d_pp, tokens, r.swa_ratio)


def solve(r: Rows, p: ServingParams, n_iter: int = 28) -> dict[str, np.ndarray]:
    """TTFT, TPOT and throughput of every row (module docstring); times in seconds, per replica."""
    a, q, g = r.a, r.q, r.g
    n = r.n
    ones = np.ones(n)
    dis = np.asarray(r.disagg, dtype=float) * ones > 0
    I, O = np.asarray(r.I, float) * ones, np.asarray(r.O, float) * ones
    d_ranks = r.d_workers * r.d_dp * ones
    servers = r.p_workers * r.p_dp * r.p_pp * ones  # prompts in prefill at once (pipeline stages overlap)
    chunk = np.asarray(r.chunk, float) * ones
    S_alone = prefill_s(a, q, g, p, I, r.p_tp, r.p_pp, r.p_dp, r.p_ep, chunk, gather=r.p_gather)
    S_busy = prefill_s(a, q, g, p, I, r.p_tp, r.p_pp, r.p_dp, r.p_ep, chunk, moe_share=r.p_dp, gather=r.p_gather)
    ctx = I + O / 2.0
    # admission: sequences the KV pool holds per decode rank (a sequence reserves its prompt and a
    # share of its output), capped by the engine's batch limit
    per_seq = kv_pool_seq_bytes(r, I + p.kv_reserve * O)
    kv_fit = np.asarray(r.kv_pool, float) / np.maximum(per_seq, 1.0)
    cap_rank = np.maximum(np.minimum(kv_fit, np.asarray(r.limit, float) * ones), 1.0)
    cap = cap_rank * d_ranks
    # KV hand-off (disagg): the prompt's cache over NVLink inside the NVLink domain, else over the
    # prefill engine's NICs
    kv_all = kv_seq_bytes(r, I) * r.d_tp * r.d_pp  # the whole prompt's cache (all heads, all stages)
    n_sys = r.p_workers * r.p_tp * r.p_pp * r.p_dp + r.d_workers * r.d_tp * r.d_pp * r.d_dp
    xfer_bw = np.where(n_sys <= g["domain"], g["scale_up"] * np.minimum(r.p_tp, 1e9) / np.maximum(r.p_tp, 1.0),
                       g["net"] * r.p_tp) * p.link_bandwidth
    t_xfer = np.where(dis, p.kv_handoff_ms * 1e-3 + kv_all / xfer_bw, 0.0)
    Om1 = np.maximum(O - 1.0, 1.0)
    n_chunks = np.ceil(I / chunk)
    mixed = np.asarray(r.mixed, float) * ones

    def t_dec_of(nd):
        b = np.maximum(nd / d_ranks, 1e-9)
        t = decode_step_s(a, q, g, p, np.maximum(b, 1.0), ctx, r.d_tp, r.d_pp, r.d_dp, r.d_ep, r.d_gather, r.d_per_island)
        return t + np.where(dis, p.transfer_poll_us * 1e-6 * _overhead_factor(g, p), 0.0)

    def prefill_at(rho):  # a prompt's prefill when a share rho of the other DP ranks prefill with it
        return S_alone + (S_busy - S_alone) * np.clip(rho, 0.0, 1.0)

    def ttft_parts(t_dec, rho, ca2, ahead=np.inf):
        S_own = prefill_at(rho)
        S_own = S_own + np.where(dis, 0.0, mixed * n_chunks * t_dec)
        # a closed loop of C users has at most the C-1 others' prompts ahead of one (one user never queues)
        wq = np.minimum(_wq_gdc(S_busy, rho, servers, ca2), ahead * S_busy / servers)
        return p.request_ms * 1e-3 + p.prompt_token_us * 1e-6 * I + S_own + wq + p.admission_steps * t_dec + t_xfer

    # --- closed loop: C clients (max-throughput: the engine full) -------------------------------------
    load = np.asarray(r.load) * ones
    C = np.where(load == LOAD_CONCURRENCY, np.asarray(r.C, float) * ones, cap)
    C_eff = np.minimum(C, cap)

    # attention-DP ranks of a MoE engine in lockstep: while any other rank runs a prefill chunk, a decoding
    # rank's step lasts that chunk's step (the MoE collectives wait for it). A rank decoding b sequences runs
    # n_chunks prefill steps per Om1 decode steps for each of them, so prefill is a share q = x/(1+x) of its
    # steps (x = b n_chunks / Om1, whatever the step times); another of the dp-1 ranks holds a decode step
    # with probability h = 1-(1-q)^(dp-1), and each decoded token pays h (t_chunk - t_own) on top.
    lock = (~dis) & (np.asarray(r.lockstep, float) * ones > 0) & (np.asarray(r.p_dp, float) * ones > 1) \
        & (np.asarray(a["n_moe"], float) * ones > 0)

    def held_s(nd, t_own, rho):
        if not lock.any():
            return np.zeros(n)
        x = np.maximum(nd / d_ranks, 0.0) * n_chunks / Om1
        h = 1.0 - np.power(1.0 / (1.0 + x), np.maximum(r.p_dp - 1.0, 0.0))
        # one step of the token budget at this load: a budget's share of a longer prompt (continuous in I; the
        # prompt over ceil(I/budget) chunks halved it one token past the budget), a whole shorter prompt
        t_chunk = prefill_at(rho) * np.minimum(chunk / np.maximum(I, 1.0), 1.0)
        return np.where(lock, h * np.maximum(t_chunk - t_own, 0.0), 0.0)

    # TensorRT-LLM's attention-DP balance holds a context until every rank has one (adp_balance_wait_s), but
    # only while every rank decodes: it gives each new request to the least-loaded rank, so every rank holds
    # one once there are as many sequences as ranks (below that, the share b of ranks that do, as a ramp).
    # Attention DP of a MoE engine only, as for the lockstep: a dense model's DP ranks are replicas.
    bal = (~dis) & (np.asarray(r.balance_iters, float) * ones > 0) & (np.asarray(r.p_dp, float) * ones > 1) \
        & (np.asarray(a["n_moe"], float) * ones > 0)

    bal_dp = (r.p_dp * ones)[bal]
    bal_iters = (np.asarray(r.balance_iters, float) * ones)[bal]

    def balance_s(nd, lam, t_iter):
        out = np.zeros(n)
        if bal.any():  # the incomplete gamma functions on the rows it applies to only (a fit evaluates it 10^4 times)
            busy = np.clip(nd[bal] / d_ranks[bal], 0.0, 1.0)
            out[bal] = busy * adp_balance_wait_s((lam * ones)[bal], bal_dp, bal_iters * (t_iter * ones)[bal])
        return out

    # A chunked-prefill engine (mixed) puts at most one token budget of prompts into each step (filling it,
    # the last prompt split), so the prefill a decoded token waits for is at most one full budget's,
    # S_busy * chunk / I, however many prompts queue (vLLM's scheduler, TensorRT-LLM's max_num_tokens); an
    # engine that prefills apart from decodes (SGLang) runs the queue first.
    # (shorter prompts than the budget: one prefill of budget/I of them, the weights streamed once)
    S_budget = prefill_s(a, q, g, p, np.maximum(chunk, I), r.p_tp, r.p_pp, r.p_dp, r.p_ep, chunk,
                         seqs=np.maximum(chunk / np.maximum(I, 1.0), 1.0), moe_share=r.p_dp, gather=r.p_gather)
    cap_wait = np.where(mixed > 0, np.where(I >= chunk, S_busy * chunk / np.maximum(I, 1.0), S_budget), np.inf)
    # A closed loop's users: a user's own next prompt waits for its reply, so its tokens wait for the others'
    # prompts only. The others prefill a share rho (C-1)/(C-rho) of the time the user decodes (their share of
    # the prefill, rho (C-1)/C, over the share of time the user is not prefilling, 1 - rho/C): 0 for one user,
    # rho for many, 1 as the prefill saturates. The engine full (max-throughput) always has a prompt waiting.
    # The users are those of one prefill queue: a DP rank's or a prefill worker's share (pipeline stages share
    # their replica's), so two users on two DP ranks decode as uninterrupted as on two replicas.
    C_loop = np.where(load == LOAD_CONCURRENCY, np.maximum(C / (r.p_workers * r.p_dp * ones), 1.0), np.inf)

    def closed(nd):
        t_dec = t_dec_of(nd)
        # a step: the decode of the running batch plus the prefill it carries. Per decoded token the prompts'
        # work is w = b S_busy / Om1 (work conservation: TPOT = t_dec + w, i.e. t_dec / (1 - rho)); with the
        # others' share above, TPOT T solves T = t_dec + w (C-1) / (C - w/T), the root above w (rho < 1) of
        # T^2 - (w + t_dec) T + t_dec w / C = 0; at most one budget's prefill a token on a mixed engine.
        w = nd * S_busy / (servers * Om1)
        disc = np.maximum((w + t_dec) ** 2 - 4.0 * t_dec * w / C_loop, 0.0)
        wait = np.minimum(0.5 * (w + t_dec + np.sqrt(disc)) - t_dec, cap_wait)
        lam = np.where(dis, nd / (Om1 * t_dec), nd / (Om1 * (t_dec + wait)))
        rho = lam * S_busy / servers
        tpot = np.where(dis, t_dec, t_dec + wait)
        extra = held_s(nd, t_dec, rho)  # per decoded token; the request rate follows (Little's law)
        tpot = tpot + extra
        lam = np.where(extra > 0, nd / (Om1 * tpot), lam)
        rho = np.where(extra > 0, lam * S_busy / servers, rho)
        ttft = ttft_parts(t_dec, rho, p.arrival_cv2, np.maximum(C - 1.0, 0.0)) + balance_s(nd, lam, tpot)
        ttft = np.where(rho >= 0.999999, np.inf, ttft)
        return lam, tpot, ttft, t_dec, rho

    lo, hi = np.zeros(n), C_eff.copy()
    for _ in range(n_iter):
        mid = 0.5 * (lo + hi)
        lam, _, ttft, _, _ = closed(mid)
        over = lam * ttft + mid > C_eff
        hi = np.where(over, mid, hi)
        lo = np.where(over, lo, mid)
    nd = lo
    lam_c, tpot_c, ttft_q, t_dec_c, rho_c = closed(nd)
    ttft_c = np.where(C_eff - nd > 1e-9 * C_eff, (C_eff - nd) / np.maximum(lam_c, 1e-12), ttft_q)
    ttft_c = ttft_c + np.maximum(C - cap, 0.0) / np.maximum(lam_c, 1e-12)  # waiting for a KV / batch slot

    # Synchronised waves, a share sync_share of the closed loop: clients of equal lengths that start together
    # finish together and send their next prompts together, so all C decode together and a wave's prompts are
    # prefilled back to back before (SGLang) or alongside (mixed chunks) the next decode steps.  A prefill server's
    # k prompts of a wave run in steps of the engine's token budget, ``per_step`` prompts a step (one prefill of
    # per_step*I tokens, ``S_step``, weights streamed once), whose first tokens come out together: a prompt waits
    # (steps + 1)/2 steps for its first token and, in an aggregated engine, the other (steps - 1)/2 before its
    # next one (a disaggregated decode pool does not wait for the prefill pool).  The wave's prefill is counted
    # once, part in TTFT and the rest in TPOT.  Each regime is solved on its own (the staggered one above, this
    # one in closed form) and the loop spends a share sync_share of its time in waves: the request rate and the
    # decode count are time averages, TTFT and TPOT averages over the requests (each regime's weighted by the
    # requests it serves), so Little's law holds for the mixture as for each regime.
    k_wave = np.maximum(C_eff / servers, 1.0)
    # budget/I prompts a step, the last one split where the budget ends (continuous in I, as the engines fill it)
    per_step = np.clip(chunk / np.maximum(I, 1.0), 1.0, k_wave)
    steps = k_wave / per_step
    S_step = prefill_s(a, q, g, p, per_step * I, r.p_tp, r.p_pp, r.p_dp, r.p_ep, chunk, seqs=per_step,
                       moe_share=r.p_dp, gather=r.p_gather)
    t_dec_wave = t_dec_of(C_eff)
    # The k-th prompt from a wave's end waits for the k prefill steps after its own: all of them before its next
    # token when prefill runs apart from decodes (mean (steps-1)/2), one per decoded token on a mixed engine,
    # which so waits for min(k, Om1) of them (the mean of min(k, m) over k uniform on [0, K]: m - m^2/2K, m < K).
    K = np.maximum(steps - 1.0, 0.0)
    mixed_wait = np.where(Om1 >= K, 0.5 * K, Om1 - Om1 ** 2 / (2.0 * np.maximum(K, 1e-12)))
    wave_wait = np.where(mixed > 0, mixed_wait, 0.5 * K)
    tpot_wave = t_dec_wave + np.where(dis, 0.0, wave_wait * S_step / Om1)
    ttft_wave = (p.request_ms * 1e-3 + p.prompt_token_us * 1e-6 * I + 0.5 * (steps + 1.0) * S_step
                 + p.admission_steps * t_dec_wave + t_xfer)
    # A wave's cycle is at least the prefill servers' work on it: a disaggregated decode pool does not wait for the
    # prefill pool, so its prompts queue there instead (closed loop: TTFT = C/rate - decode time).
    lam_wave = np.minimum(C_eff / (ttft_wave + Om1 * tpot_wave), servers * per_step / S_step)
    ttft_wave = np.maximum(ttft_wave, C_eff / lam_wave - Om1 * tpot_wave)
    nd_wave = lam_wave * Om1 * tpot_wave  # over a wave's cycle: all C in the decode phase, none in the prefill one
    ttft_wave = ttft_wave + np.maximum(C - cap, 0.0) / lam_wave  # users beyond the KV / batch limit wait a slot
    w_st, w_wave = (1.0 - p.sync_share) * lam_c, p.sync_share * lam_wave  # requests/s each regime serves
    lam_mix = w_st + w_wave
    lam_mix = np.maximum(lam_mix, 1e-300)
    tpot_c = (w_st * tpot_c + w_wave * tpot_wave) / lam_mix
    ttft_c = np.where(np.isfinite(ttft_c), (w_st * np.where(np.isfinite(ttft_c), ttft_c, 0.0) + w_wave * ttft_wave)
                      / lam_mix, np.inf)
    nd = (1.0 - p.sync_share) * nd + p.sync_share * nd_wave
    rho_c = (1.0 - p.sync_share) * rho_c + p.sync_share * lam_wave * S_step / per_step / servers
    lam_c = lam_mix

    # --- open loop: λ requests/s ------------------------------------------------------------------------
    rate = load == LOAD_RATE
    lam_o = np.where(rate, np.asarray(r.lam, float) * ones, 0.0)
    rho_o = lam_o * S_busy / servers
    if rate.any():
        def tpot_open(nd):
            t_dec = t_dec_of(nd)
            # an open loop's prompts are always others': the work-conserving wait, at most one budget's prefill
            # a token on a mixed engine (as in the closed loop)
            wait = np.minimum(t_dec * rho_o / np.maximum(1.0 - rho_o, 1e-6), cap_wait)
            return np.where(dis, t_dec, t_dec + wait + held_s(nd, t_dec, rho_o)), t_dec

        lo, hi = np.zeros(n), cap.copy()
        for _ in range(n_iter):
            mid = 0.5 * (lo + hi)
            tp_mid, _ = tpot_open(mid)
            more = lam_o * Om1 * tp_mid > mid  # the decode phase holds more than mid
            lo = np.where(more, mid, lo)
            hi = np.where(more, hi, mid)
        # the bisection's upper end, tightened by one fixed-point step (still >= the solution, as TPOT grows with
        # the batch): at one request in three years (1e-8/s) the batch is then 2.4e-8, not the bisection's
        # resolution (the KV cap / 2^28, 4e-6 for a cap of 1,182)
        nd_o = np.minimum(hi, lam_o * Om1 * tpot_open(hi)[0])
        tpot_o, t_dec_o = tpot_open(nd_o)
        stable = (rho_o < 0.999) & (lam_o * Om1 * tpot_o <= cap * 1.0001)
        # A request also waits for one of the engine's `cap` sequence slots (its batch limit, or what its KV pool
        # admits): each holds a request for its prefill (in a disaggregated system, the KV hand-off: the decode
        # engine admits it after the prefill pool) and its Om1 decode steps, so the slots are a G/D/c queue of
        # Poisson arrivals (ca2 = 1) at their occupancy. A limit just above the mean in flight is not free: 61
        # sequences in flight through 64 slots wait a tenth of a residency (Sakasegawa: 0.5 x 0.953^10.4 / (64 x
        # 0.047)), 0.8 s for 255 decode steps of 30 ms, where a mean-value model sees room. In a closed loop the users themselves bound what is in flight (C_eff), so nothing waits.
        residency = np.where(dis, t_xfer, S_alone) + Om1 * tpot_o
        slots_busy = np.minimum(lam_o * residency / np.maximum(cap, 1.0), 0.999999)
        slot_wait = _wq_gdc(residency, slots_busy, np.maximum(cap, 1.0), 1.0)
        stable = stable & (lam_o * residency < cap * 0.999999)
        ttft_o = np.where(stable, ttft_parts(t_dec_o, rho_o, 1.0) + balance_s(nd_o, lam_o, tpot_o) + slot_wait,
                          np.inf)
    else:
        nd_o, tpot_o, t_dec_o, ttft_o, stable = nd, tpot_c, t_dec_c, ttft_c, np.ones(n, bool)

    rate = load == LOAD_RATE
    out = {
        "tpot_s": np.where(rate, np.where(stable, tpot_o, tpot_c), tpot_c),
        "ttft_s": np.where(rate, ttft_o, ttft_c),
        "requests_per_s": np.where(rate, np.where(stable, lam_o, lam_c), lam_c),
        "decode_seqs": np.where(rate, np.where(stable, nd_o, nd), nd),
        "stable": np.where(rate, stable, True),
        "t_dec_s": np.where(rate, t_dec_o, t_dec_c),
        "prefill_util": np.where(rate, rho_o, rho_c),
        "prefill_s": S_alone,
        "admitted": cap,
        "xfer_s": t_xfer,
    }
    return out


# --- plans of one model on one cluster ---------------------------------------------------------------

@dataclass(frozen=True)
class ServeEstimate:
    """Estimates for a batch of serve plans; every array has one entry per plan."""

    output_tokens_per_s: np.ndarray
    output_tokens_per_s_per_gpu: np.ndarray
    tokens_per_s_per_user: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    batch: np.ndarray  # sequences decoding per replica in steady state
    max_batch_fit: np.ndarray  # full-length sequences the KV pool holds per engine (all dp ranks)
    memory_gib_per_gpu: np.ndarray
    memory_budget_gib: np.ndarray  # what the engine's memory flag lets it use per GPU
    memory_knob: np.ndarray  # the value of that flag
    memory_breakdown_gib: Mapping[str, np.ndarray]
    requests_per_s: np.ndarray
    prefill_utilisation: np.ndarray
    fits: np.ndarray
    meets_targets: np.ndarray
    reason: np.ndarray  # object array: "" when fits
    misses: "MissTexts"  # misses[i]: "" when plan i meets every target
    memory_capacity_gib: float
    engine: str
    # disaggregated plans: one GPU of a prefill engine (NaN for aggregated plans); memory_gib_per_gpu is the
    # larger of the two pools
    prefill_memory_gib_per_gpu: np.ndarray | None = None
    prefill_memory_knob: np.ndarray | None = None

    def __len__(self) -> int:
        return int(self.output_tokens_per_s.shape[0])

    def row(self, i: int) -> dict:
        out = {
            "output_tokens_per_s": float(self.output_tokens_per_s[i]),
            "output_tokens_per_s_per_gpu": float(self.output_tokens_per_s_per_gpu[i]),
            "tokens_per_s_per_user": float(self.tokens_per_s_per_user[i]),
            "ttft_ms": _finite(self.ttft_ms[i]),
            "tpot_ms": _finite(self.tpot_ms[i]),
            "batch": float(self.batch[i]),
            "max_batch_fit": int(self.max_batch_fit[i]),
            "requests_per_s": float(self.requests_per_s[i]),
            "prefill_utilisation": float(self.prefill_utilisation[i]),
            "memory_gib_per_gpu": float(self.memory_gib_per_gpu[i]),
            "memory_budget_gib": float(self.memory_budget_gib[i]),
            "memory_headroom_gib": float(self.memory_budget_gib[i] - self.memory_gib_per_gpu[i]),
            "engine": self.engine,
            "engine_memory_flag": {E.DEFAULTS[self.engine].memory_knob: round(float(self.memory_knob[i]), 3)},
            "fits": bool(self.fits[i]),
            "meets_targets": bool(self.meets_targets[i]),
            "memory_breakdown_gib": {k: float(v[i]) for k, v in self.memory_breakdown_gib.items()},
        }
        if self.prefill_memory_gib_per_gpu is not None and np.isfinite(self.prefill_memory_gib_per_gpu[i]):
            out["decode_memory_gib_per_gpu"] = float(self.memory_breakdown_gib["weights"][i]
                                                     + sum(self.memory_breakdown_gib[k][i] for k in
                                                           ("kv_cache", "activations", "cuda_graphs", "runtime")))
            out["prefill_memory_gib_per_gpu"] = float(self.prefill_memory_gib_per_gpu[i])
            out["prefill_engine_memory_flag"] = {E.DEFAULTS[self.engine].memory_knob:
                                                 round(float(self.prefill_memory_knob[i]), 3)}
        if self.reason[i]:
            out["infeasible_reason"] = str(self.reason[i])
        if self.misses[i]:
            out["misses"] = str(self.misses[i])
        return out


def add_serving_cost(estimate: dict, n_gpus: int, price_usd_per_gpu_hour: float) -> dict:
    """What the deployment costs at a price per GPU-hour: per hour, and per million output tokens at the
    estimated throughput (prompt tokens ride along; none when the plan produces no tokens)."""
    usd_per_hour = price_usd_per_gpu_hour * n_gpus
    tokens_per_hour = estimate["output_tokens_per_s"] * 3600.0
    per_million = usd_per_hour / tokens_per_hour * 1e6 if tokens_per_hour > 0 else None
    return {**estimate, "usd_per_gpu_hour": price_usd_per_gpu_hour, "usd_per_hour": usd_per_hour,
            "usd_per_million_output_tokens": per_million}


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


def plan_precisions(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch) -> dict[str, np.ndarray]:
    g = cluster_scalars(cluster)
    # one row per weight format (a handful), spread over the plans by index: a search's 10^5 plans share them
    codes, which = np.unique(np.asarray(plans.weights, dtype=np.int64), return_inverse=True)
    kv_codes, kv_which = np.unique(np.asarray(plans.kv, dtype=np.int64), return_inverse=True)
    table = precision_arrays([class_formats(model.is_moe, WEIGHTS[int(w)]) for w in codes], [g] * len(codes),
                             [KV_DTYPES[0]] * len(codes))
    out = {k: v[which.reshape(-1)] for k, v in table.items() if k != "kv_b"}
    out["kv_b"] = np.array([KV_BYTES[KV_DTYPES[int(k)]] for k in kv_codes], dtype=np.float64)[kv_which.reshape(-1)]
    return out


def engine_memory(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, engine: str, *, side: str = "d",
                  fraction=None, max_len=None) -> E.MemoryBudget:
    """The engine's memory budget on one GPU of each plan's decode (``d``) or prefill (``p``) engines."""
    a, g = model_scalars(model), cluster_scalars(cluster)
    q = plan_precisions(model, cluster, plans)
    cols = {k: getattr(plans, f"{side}_{k}").astype(np.float64) for k in ("tp", "pp", "dp", "ep")}
    per_rank = plans.max_batch / cols["dp"]
    hw = cluster.hardware
    page = E.model_kv_page_tokens(model, hw)
    chunk = E.DEFAULTS[E.engine_family(engine)].server_chunk(hw.memory_gib, cols["dp"], hw.name, moe=model.is_moe,
                                                             page=page)
    role = np.where(plans.disagg > 0, E.ROLE_PREFILL if side == "p" else E.ROLE_DECODE, E.ROLE_AGG)
    return E.memory_budget(engine, a, q, g, cols["tp"], cols["pp"], cols["dp"], cols["ep"], per_rank, chunk,
                           fraction=fraction, role=role)


def kv_bytes_per_token(model: ModelSpec, kv: str) -> float:
    """KV-cache bytes of one token over all layers (one replica of the cache; long-context rate)."""
    return model.kv_cache_bytes_per_token(KV_BYTES[kv])


def decode_weight_bytes_per_step(model: ModelSpec, weights: str) -> float:
    """Bytes of weights one decode step at batch 1 reads on one GPU holding the whole model (only the
    ``top_k`` routed experts a single token uses; bf16 norms and output layer; the embedding is gathered)."""
    a = model_scalars(model)
    attn, mlp, exp = class_formats(model.is_moe, weights)
    experts = a["n_moe"] * a["P_expert"] * a["topk"] * WEIGHT_BYTES[exp]
    out = a["P_head"] if a["P_head"] else a["P_embed"]
    return (a["P_attn"] * WEIGHT_BYTES[attn] + (a["P_dense"] + a["P_shared"]) * WEIGHT_BYTES[mlp] + experts
            + (a["P_norm"] + out) * 2.0)


def max_batch_fit(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, max_len: int, engine: str = E.DEFAULT_ENGINE,
                  *, fraction=None) -> np.ndarray:
    """Sequences of ``max_len`` tokens whose KV cache the engine's pool holds, per engine (all dp ranks)."""
    mem = engine_memory(model, cluster, plans, engine, fraction=fraction)
    a = model_scalars(model)
    q = plan_precisions(model, cluster, plans)
    per_seq = E.kv_pool_bytes_per_sequence(a, q["kv_b"], plans.d_tp, plans.d_pp, float(max_len),
                                           E.swa_pool_ratio(engine))
    return (np.floor(mem.kv_pool / np.maximum(per_seq, 1.0)) * plans.d_dp).astype(np.int64)


def plan_rows(model: ModelSpec, cluster: Cluster, workload: ServeWorkload, plans: ServePlanBatch, engine: str,
              mem: E.MemoryBudget) -> Rows:
    a, g = model_scalars(model), cluster_scalars(cluster)
    q = plan_precisions(model, cluster, plans)
    replicas = plans.replicas.astype(np.float64)
    load = {"concurrency": LOAD_CONCURRENCY, "rate": LOAD_RATE}.get(workload.mode, LOAD_FULL)
    d = E.DEFAULTS[E.engine_family(engine)]
    per_rank_limit = plans.max_batch / plans.d_dp.astype(np.float64)
    f = lambda k: getattr(plans, k).astype(np.float64)  # noqa: E731
    return Rows(a=a, g=g, q=q, disagg=plans.disagg.astype(np.float64),
                p_workers=f("p_workers"), p_tp=f("p_tp"), p_pp=f("p_pp"), p_dp=f("p_dp"), p_ep=f("p_ep"),
                d_workers=f("d_workers"), d_tp=f("d_tp"), d_pp=f("d_pp"), d_dp=f("d_dp"), d_ep=f("d_ep"),
                load=load, I=float(workload.input_len), O=float(workload.output_len),
                C=(workload.concurrency or 0) / replicas, lam=(workload.request_rate or 0.0) / replicas,
                chunk=d.prefill_chunk(cluster.hardware.memory_gib, f("p_dp"), cluster.hardware.name, moe=model.is_moe,
                                      page=E.model_kv_page_tokens(model, cluster.hardware)),
                mixed=float(d.mixed_prefill), limit=per_rank_limit,
                kv_pool=mem.kv_pool, n=len(plans), lockstep=float(d.adp_lockstep),
                balance_iters=float(d.adp_balance_timeout_iters),
                p_gather=d.gathers(plans.p_tp, plans.p_dp, plans.p_ep), d_gather=d.gathers(plans.d_tp, plans.d_dp, plans.d_ep),
                d_per_island=d.decode_dispatch_per_island(plans.disagg, np.ceil(per_rank_limit)),
                swa_ratio=E.swa_pool_ratio(engine))


def estimate_serving(model: ModelSpec, cluster: Cluster, workload: ServeWorkload, plans: ServePlanBatch,
                     params: ServingParams, *, engine: str = E.DEFAULT_ENGINE, memory_fraction=None,
                     engine_batch_limit: bool = False) -> ServeEstimate:
    """Estimate every serve plan on ``engine`` (its memory rule, its defaults, and ``params``).

    ``engine_batch_limit``: the plans' max_batch is the engine's own default, not one the user set: the engine
    admits what its KV cache holds below it, so a KV budget that holds fewer full-length sequences is not a
    reason the plan cannot run (a stated max_batch is a promise the budget must keep).  ``memory_fraction``: the
    value the user sets on the engine's memory flag (``engines.memory_budget``); None: the engine's default."""
    hw = cluster.hardware
    n = len(plans)
    mem = engine_memory(model, cluster, plans, engine, fraction=memory_fraction)
    rows = plan_rows(model, cluster, workload, plans, engine, mem)
    a, q = rows.a, rows.q
    max_len = float(workload.max_len)
    per_seq_full = E.kv_pool_bytes_per_sequence(a, q["kv_b"], rows.d_tp, rows.d_pp, max_len, rows.swa_ratio)
    fit_rank = np.floor(mem.kv_pool / np.maximum(per_seq_full, 1.0))
    fit = (fit_rank * plans.d_dp).astype(np.int64)
    per_rank = plans.max_batch / plans.d_dp.astype(np.float64)
    reason = np.full(n, "", dtype=object)
    if not engine_batch_limit:
        reason[fit_rank < per_rank] = f"max_batch exceeds what the {engine} KV-cache budget holds"
    prefill_used = prefill_knob = pmem = None
    if (plans.disagg).any():  # the prefill engines must hold their weights and one prompt
        pmem = engine_memory(model, cluster, plans, engine, side="p", fraction=memory_fraction)
        p_seq = E.kv_pool_bytes_per_sequence(a, q["kv_b"], rows.p_tp, rows.p_pp, float(workload.input_len),
                                             rows.swa_ratio)
        reason[plans.disagg & (pmem.kv_pool < p_seq)] = "the prefill engines' weights leave no room for a prompt's KV cache"
        # One prefill GPU: its weights, reserve and the KV of the prompt in flight (then handed to decode).
        used = (pmem.weights + pmem.activations + pmem.cuda_graphs + pmem.runtime + p_seq) * np.ones(n)
        prefill_used = np.where(plans.disagg, used / GIB, np.nan)
        prefill_knob = np.where(plans.disagg, np.asarray(pmem.knob, float) * np.ones(n), np.nan)
    reason[fit_rank < 1] = "weights and the engine's reserve leave no room for one sequence's KV cache"
    # the reserve grows with max_batch (the sampler's and CUDA graphs' buffers): a batch too large to launch is
    # said as such, not as weights that do not fit
    if (fit_rank < 1).any() and (plans.max_batch > plans.d_dp).any():
        one = dataclasses.replace(plans, max_batch=plans.d_dp.astype(plans.max_batch.dtype))  # one sequence per rank
        mem_one = engine_memory(model, cluster, one, engine, fraction=memory_fraction)
        by_batch = (fit_rank < 1) & (mem_one.kv_pool >= per_seq_full)
        reason[by_batch] = "max_batch is too large: its activation buffers leave no room for one sequence's KV cache"
    if memory_fraction is not None and E.engine_family(engine) == "sglang":
        # --mem-fraction-static caps weights plus KV; activations, CUDA graphs and the runtime live in the rest,
        # so a stated fraction that leaves less than they need fails at launch (SGLang's own default keeps them)
        sides = [(mem, np.ones(n, bool))] + ([(pmem, plans.disagg)] if pmem is not None else [])
        for side_mem, on in sides:
            outside = (1.0 - np.asarray(side_mem.knob, float)) * hw.memory_gib * GIB * np.ones(n)
            need = (side_mem.activations + side_mem.cuda_graphs + side_mem.runtime) * np.ones(n)
            reason[on & (outside < need)] = (f"--mem-fraction-static {float(memory_fraction):g} leaves less memory "
                                             "outside the pool than activations, CUDA graphs and the runtime need")
    if E.engine_family(engine) == "vllm":
        # vLLM 0.33's --enable-expert-parallel spreads the experts over the whole engine (ep = tp*dp) or not at
        # all; narrower EP groups are SGLang's (--ep-size) and cannot be launched on vLLM.
        partial = np.zeros(n, dtype=bool)
        for side in ("p", "d"):
            ep, width = getattr(plans, f"{side}_ep"), getattr(plans, f"{side}_tp") * getattr(plans, f"{side}_dp")
            partial |= (ep > 1) & (ep != width)
        reason[partial] = "vLLM's expert parallelism spans the whole engine (ep = tp*dp) or none"
    limit = model.max_seq_len
    if limit and workload.max_len > limit:
        # the engines refuse a context beyond the model's (vLLM --max-model-len, SGLang --context-length)
        reason[:] = (f"input + output ({workload.max_len:,} tokens) exceed {model.name}'s context window of "
                     f"{limit:,} tokens")
    fits = reason == ""
    res = solve(rows, params)
    replicas = plans.replicas.astype(np.float64)
    O = float(workload.output_len)
    total = res["requests_per_s"] * O * replicas
    tpot, ttft = res["tpot_s"], res["ttft_s"]
    kv_needed = np.minimum(per_rank, np.maximum(fit_rank, 0)) * per_seq_full
    gib = lambda x: np.asarray(x, float) / GIB * np.ones(n)  # noqa: E731
    breakdown = {"weights": gib(mem.weights), "kv_cache": gib(kv_needed), "activations": gib(mem.activations),
                 "cuda_graphs": gib(mem.cuda_graphs), "runtime": gib(mem.runtime)}
    memory = sum(breakdown.values())
    if prefill_used is not None:
        memory = np.where(plans.disagg, np.fmax(memory, prefill_used), memory)
    breakdown["kv_pool"] = gib(mem.kv_pool)
    stable = np.asarray(res["stable"], bool)
    meets = fits & stable
    ttft_ms, tpot_ms = ttft * 1e3, tpot * 1e3
    if workload.ttft_ms is not None:
        meets &= ~(ttft_ms > workload.ttft_ms)
    if workload.tpot_ms is not None:
        meets &= ~(tpot_ms > workload.tpot_ms)
    misses = MissTexts(ttft_ms, tpot_ms, stable, res["requests_per_s"] * replicas, workload)
    budget = np.where(E.engine_family(engine) == "vllm", mem.budget, hw.memory_gib * GIB) * np.ones(n)
    return ServeEstimate(
        output_tokens_per_s=total,
        output_tokens_per_s_per_gpu=total / cluster.n_gpus,
        tokens_per_s_per_user=1.0 / tpot,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        batch=res["decode_seqs"],
        max_batch_fit=np.maximum(fit, 0),
        memory_gib_per_gpu=memory,
        memory_budget_gib=budget / GIB,
        memory_knob=np.asarray(mem.knob, float) * np.ones(n),
        memory_breakdown_gib=breakdown,
        requests_per_s=res["requests_per_s"] * replicas,
        prefill_utilisation=np.asarray(res["prefill_util"], float),
        fits=fits,
        meets_targets=meets,
        reason=reason,
        misses=misses,
        prefill_memory_gib_per_gpu=prefill_used,
        prefill_memory_knob=prefill_knob,
        memory_capacity_gib=hw.memory_gib,
        engine=engine,
    )


def _miss_text(value: float, target: float) -> str:
    """``value`` with the target's decimals (whole ms for a whole target), or more where fewer would not show it
    above the target: 50.3 over a 50 ms target reads "50.3 > 50", not "50 > 50"; 21.702 over 21.7, "21.702"."""
    written = f"{target:g}"
    start = len(written.split(".")[1]) if "." in written and "e" not in written else 0
    for digits in range(start, start + 4):
        text = f"{value:,.{digits}f}"
        if float(text.replace(",", "")) > float(written):
            return text
    return f"{value:,.6g}"


def _below_text(value: float, bound: float) -> str:
    """``value`` (< ``bound``) with three significant digits, or as many more as it takes to read below ``bound``:
    a capacity of 16.357/s under a rate of 16.35 reads "16.357", not "16.4"."""
    for digits in range(3, 10):
        text = f"{value:.{digits}g}"
        if float(text) < bound:
            return text
    return f"{value:.10g}"


@dataclass(frozen=True)
class MissTexts:
    """What each plan misses of the targets ("" when it meets them), written when asked for: a search estimates
    10^5 plans and shows ten, and writing the text of every one took longer than estimating them."""

    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    stable: np.ndarray
    capacity_per_s: np.ndarray
    workload: ServeWorkload

    def __len__(self) -> int:
        return int(np.shape(self.ttft_ms)[0])

    def __getitem__(self, i: int) -> str:
        w, parts = self.workload, []
        for name, value, target in (("TTFT", self.ttft_ms[i], w.ttft_ms), ("TPOT", self.tpot_ms[i], w.tpot_ms)):
            if target is not None and value > target:  # NaN is no miss; infinity is an unbounded queue
                parts.append(f"{name} {_miss_text(value, target)} > {target:g} ms" if np.isfinite(value)
                             else f"{name} unbounded (overloaded)")
        if w.mode == "rate" and not self.stable[i]:
            capacity = float(self.capacity_per_s[i])
            # the engine full serves a little more than an open loop can sustain (its queues grow without bound near
            # the end): a rate between the two is at capacity, not past it
            parts.append(f"rate {w.request_rate:g}/s exceeds capacity {_below_text(capacity, w.request_rate)}/s"
                         if capacity < w.request_rate else
                         f"rate {w.request_rate:g}/s is at capacity (the engine full serves {capacity:.4g}/s), where "
                         "the queue grows without bound")
        return "; ".join(parts)
