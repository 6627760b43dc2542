"""The serving cost model: ``estimate_serving(model, cluster, workload, plans, params)``.

A pure function, vectorised over a :class:`~autotune.serving.plan.ServePlanBatch`
(docs/cost-model.md, "Serving").  Per engine (one replica of ``tp * pp``
GPUs) in steady-state continuous batching with ``B`` sequences in flight:

* One decode *round* advances every sequence by a token.  Each pipeline stage reads its
  weights once per micro-batch (``pp`` micro-batches of ``B / pp``) and the KV cache of
  its sequences, and runs the GEMMs of the decode tokens plus, on average, the prefill
  tokens that arrive meanwhile (``B * I / O`` per round: each sequence is prefilled once
  per ``O`` output tokens, in the same mixed steps, as in-flight batching does).  A step
  takes the longer of its HBM traffic (at ``decode_bandwidth`` of HBM bandwidth) and its
  FLOPs (at ``gemm`` of the tensor-core peak of the plan's compute precision): a roofline.
* TP adds two all-reduces per layer per step (attention output and MLP down projection);
  at decode sizes their cost is latency: two NVLink hops per one-shot all-reduce plus the
  bandwidth term.  PP adds a send per stage boundary.  Each step pays ``step_overhead_us``
  (scheduling, sampling, launches).
* TPOT is the round time; throughput per engine is ``B`` tokens per round.  TTFT is one
  mixed step that carries the request's whole prompt (plus queueing under a request rate).
* KV capacity: ``(memory - weights - reserve_gib) * kv_fraction`` per GPU, over the KV
  bytes per token per GPU, gives the largest batch of full-length sequences that fits.

Weight bytes per parameter (``weight_bytes_per_param``): bf16 2, fp8 and int8 1, int4 0.5
plus one bf16 scale per group of 128 (0.515625), fp4 (NVFP4) 0.5 plus one fp8 scale per
16 (0.5625).  Embeddings, the output layer and norms stay bf16 in every scheme.
"""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Mapping

import numpy as np

from ..inputs.hardware import Cluster, Hardware
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import ServeWorkload
from .plan import COMPUTE_PRECISION, KV_DTYPES, WEIGHTS, ServePlanBatch

GIB = float(2**30)
INT4_GROUP = 128  # weights per bf16 scale (AWQ/GPTQ default group size)
FP4_GROUP = 16  # weights per fp8 scale (NVFP4 block size)
WEIGHT_BYTES: Mapping[str, float] = {
    "bf16": 2.0,
    "fp8": 1.0,
    "int8": 1.0,
    "int4": 0.5 + 2.0 / INT4_GROUP,
    "fp4": 0.5 + 1.0 / FP4_GROUP,
}
KV_BYTES: Mapping[str, float] = {"bf16": 2.0, "fp8": 1.0}
ACTIVATION_BYTES = 2.0  # bf16 activations on the wire (TP all-reduce, PP sends)


@dataclass(frozen=True)
class ServingParams:
    """The serving model's free parameters: few and physical (fitted per GPU and engine release).

    ``decode_bandwidth``: achieved fraction of HBM bandwidth when streaming weights.
    ``kv_bandwidth``: the same for decode attention reading the paged KV cache (scattered
    blocks, per-sequence kernels: measurably lower than a weight GEMV).  ``gemm``: achieved fraction of the tensor-core peak in compute-bound (prefill,
    large-batch) GEMMs and attention.  ``step_overhead_us``: fixed time per engine step.
    ``reserve_gib``: memory per GPU that is neither weights nor KV cache (CUDA context,
    activations, CUDA graphs, workspaces).  ``kv_fraction``: share of the remaining memory
    the engine gives the KV cache (vLLM's gpu-memory-utilization, TensorRT-LLM's
    kv_cache_free_gpu_mem_fraction).  ``seq_overhead_us``: time per decoding sequence per
    step (sampling, logits, per-sequence scheduling and KV paging).
    ``kv_reread_fraction`` (an engine property, fitted once per engine release, not per GPU):
    the share of the re-reads of a KV head by the other query heads of its group
    that reach HBM.  0: the kernel loads each KV head once for its whole group (grouped-query
    attention cuts KV traffic by the group size); 1: it streams the cache once per query head
    (GQA saves KV memory but not KV traffic).
    """

    decode_bandwidth: float = 0.75
    kv_bandwidth: float = 0.40
    gemm: float = 0.55
    step_overhead_us: float = 300.0
    reserve_gib: float = 4.0
    kv_fraction: float = 0.90
    seq_overhead_us: float = 0.0
    kv_reread_fraction: float = 0.0

    def replace(self, **changes: float) -> "ServingParams":
        import dataclasses

        return dataclasses.replace(self, **changes)


SERVING_PARAM_FIELDS = tuple(f.name for f in fields(ServingParams))
SERVING_PARAM_BOUNDS: Mapping[str, tuple[float, float]] = {
    "decode_bandwidth": (0.2, 1.0),
    "kv_bandwidth": (0.02, 1.0),
    "gemm": (0.1, 1.0),
    "step_overhead_us": (0.0, 1500.0),
    "reserve_gib": (0.0, 32.0),
    "kv_fraction": (0.3, 1.0),
    "seq_overhead_us": (0.0, 100.0),
}


def weight_bytes_per_param(weights: str) -> float:
    return WEIGHT_BYTES[weights]


@dataclass(frozen=True)
class ModelBytes:
    """Parameter counts the serving model needs, split by how they are stored and read."""

    layer_dense: float  # per layer: attention + dense MLP + router + shared experts (quantised)
    layer_experts: float  # per MoE-averaged layer: routed experts (quantised)
    norms: float  # all layers + final norm (bf16)
    embedding: float  # input embedding (bf16; gathered, not streamed)
    output: float  # output layer (bf16; streamed every step); 0 when tied
    linear_active_per_token: float  # quantised GEMM parameters one token passes through (all layers)


def model_bytes(model: ModelSpec) -> ModelBytes:
    L = model.n_layers
    experts_total = model.n_moe_layers * model.expert_params_per_moe_layer
    dense_total = L * model.attention_params_per_layer + model.n_dense_layers * model.dense_mlp_params_per_layer
    dense_total += model.n_moe_layers * model.shared_params_per_moe_layer
    active_experts = 0.0
    if model.moe:
        active_experts = experts_total * model.moe.top_k / model.moe.n_experts
    return ModelBytes(
        layer_dense=dense_total / L,
        layer_experts=experts_total / L,
        norms=float(L * model.norm_params_per_layer + model.hidden_size),
        embedding=float(model.embedding_params),
        output=float(model.output_params),
        linear_active_per_token=dense_total + active_experts,
    )


def decode_weight_bytes_per_step(model: ModelSpec, weights: str) -> float:
    """Bytes of weights one decode step at batch 1 reads on one GPU holding the whole model.

    Quantised layer weights (MoE: only the ``top_k`` routed experts a single token uses),
    bf16 norms and the bf16 output layer; the input embedding is gathered, not streamed.
    """
    mb = model_bytes(model)
    bpp = WEIGHT_BYTES[weights]
    experts = mb.layer_experts * model.n_layers
    if model.moe:
        experts *= model.moe.top_k / model.moe.n_experts
    output = mb.output if mb.output else mb.embedding  # tied: the embedding is the output layer
    return (mb.layer_dense * model.n_layers + experts) * bpp + (mb.norms + output) * 2.0


def kv_bytes_per_token(model: ModelSpec, kv: str) -> float:
    """KV-cache bytes of one token over all layers (K and V, every KV head)."""
    return 2.0 * model.n_layers * model.kv_width * KV_BYTES[kv]


@dataclass(frozen=True)
class ServeEstimate:
    """Estimates for a batch of serve plans; every array has one entry per plan."""

    output_tokens_per_s: np.ndarray
    output_tokens_per_s_per_gpu: np.ndarray
    tokens_per_s_per_user: np.ndarray
    ttft_ms: np.ndarray
    tpot_ms: np.ndarray
    batch: np.ndarray  # sequences in flight per replica in steady state
    max_batch_fit: np.ndarray  # KV-cache-limited batch per replica
    memory_gib_per_gpu: np.ndarray
    memory_breakdown_gib: Mapping[str, np.ndarray]
    requests_per_s: np.ndarray
    fits: np.ndarray
    meets_targets: np.ndarray
    reason: np.ndarray  # object array: "" when fits
    misses: np.ndarray  # object array: "" when every target is met
    memory_capacity_gib: float
    bound: np.ndarray  # object array: "memory" or "compute" (the decode round's roofline side)

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
            "memory_gib_per_gpu": float(self.memory_gib_per_gpu[i]),
            "memory_headroom_gib": self.memory_capacity_gib - float(self.memory_gib_per_gpu[i]),
            "fits": bool(self.fits[i]),
            "meets_targets": bool(self.meets_targets[i]),
            "decode_bound": str(self.bound[i]),
            "memory_breakdown_gib": {k: float(v[i]) for k, v in self.memory_breakdown_gib.items()},
        }
        if self.reason[i]:
            out["infeasible_reason"] = str(self.reason[i])
        if self.misses[i]:
            out["misses"] = str(self.misses[i])
        return out


def _finite(value: float) -> float | None:
    return float(value) if np.isfinite(value) else None


class _Engine:
    """Per-plan constants of one engine (replica), shared by the step-time functions."""

    def __init__(self, model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, params: ServingParams):
        hw: Hardware = cluster.hardware
        self.model, self.hw, self.params = model, hw, params
        self.tp = plans.tp.astype(np.float64)
        self.pp = plans.pp.astype(np.float64)
        w_names = np.array(WEIGHTS)[plans.weights]
        self.bpp = np.array([WEIGHT_BYTES[w] for w in WEIGHTS])[plans.weights]
        kv_b = np.array([KV_BYTES[k] for k in KV_DTYPES])[plans.kv]
        peaks = {w: (hw.peak_flops(COMPUTE_PRECISION[w]) if hw.supports(COMPUTE_PRECISION[w]) else hw.peak_flops("bf16"))
                 for w in WEIGHTS}
        self.rate = np.array([peaks[w] for w in w_names]) * params.gemm  # FLOP/s per GPU
        self.attn_rate = hw.peak_flops("bf16") * params.gemm
        self.bw = hw.memory_bandwidth_gb_per_s * 1e9 * params.decode_bandwidth
        self.kv_bw = hw.memory_bandwidth_gb_per_s * 1e9 * params.kv_bandwidth
        mb = model_bytes(model)
        self.mb = mb
        L = model.n_layers
        self.layers_per_stage = L / self.pp
        # Weights per GPU (bytes): quantised layers split over tp and pp; bf16 norms, embedding, output.
        quantised = (mb.layer_dense + mb.layer_experts) * L * self.bpp
        bf16 = (mb.norms + mb.embedding + mb.output) * 2.0
        self.weights_per_gpu = (quantised + bf16) / (self.tp * self.pp)
        # KV heads split over tp; with tp > KV heads each GPU keeps a copy of one head.
        kv_heads_per_gpu = np.maximum(model.n_kv_heads / self.tp, 1.0)
        self.kv_per_token_gpu = 2.0 * self.layers_per_stage * kv_heads_per_gpu * model.head_dim * kv_b
        # Bytes decode attention streams per token of context: per KV head, or per query head
        # when the engine's kernel does not share a KV head among its query group.
        group = max(model.n_heads / model.n_kv_heads, 1.0)
        read_heads = kv_heads_per_gpu * (1.0 + (group - 1.0) * params.kv_reread_fraction)
        self.kv_read_per_token_gpu = 2.0 * self.layers_per_stage * read_heads * model.head_dim * kv_b
        self.output_read = (mb.output if mb.output else mb.embedding) * 2.0

    # --- memory -------------------------------------------------------------------------------
    def kv_capacity_tokens(self, memory_gib: float) -> np.ndarray:
        free = memory_gib * GIB - self.weights_per_gpu - self.params.reserve_gib * GIB
        return np.maximum(free * self.params.kv_fraction, 0.0) / self.kv_per_token_gpu

    # --- time -----------------------------------------------------------------------------------
    def _experts_read_fraction(self, tokens: np.ndarray) -> np.ndarray:
        moe = self.model.moe
        if not moe:
            return np.ones_like(tokens)
        e, k = float(moe.n_experts), float(moe.top_k)
        return 1.0 - (1.0 - k / e) ** np.maximum(tokens, 1.0)

    def allreduce_s(self, message_bytes: np.ndarray, cluster: Cluster) -> np.ndarray:
        """One-shot all-reduce inside a node: two link hops of latency plus the ring bandwidth term."""
        link = self.hw.intra_node
        bw = link.bandwidth_gb_per_s * 1e9 * self.hw.efficiency.intra_node_bandwidth
        t = 2.0 * (self.tp - 1.0) / self.tp * message_bytes / bw + 2.0 * link.latency_us * 1e-6
        return np.where(self.tp > 1, t, 0.0)

    def step_s(self, decode: np.ndarray, prefill: np.ndarray, context: np.ndarray, prefill_context: np.ndarray,
               cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
        """Time of one engine step that advances ``decode`` sequences (mean KV length ``context``) and
        prefills ``prefill`` prompt tokens (mean attended length ``prefill_context``), all ``pp`` micro-batches.

        Returns (seconds, compute_bound).
        """
        m = self.model
        pp = self.pp
        micro = np.maximum(np.minimum(pp, np.maximum(decode, 1.0)), 1.0)  # micro-batches in flight
        b = decode / micro
        pf = prefill / micro
        tokens = b + pf
        ls = self.layers_per_stage
        weight_read = ls * (self.mb.layer_dense + self.mb.layer_experts * self._experts_read_fraction(tokens)) * self.bpp
        weight_read = (weight_read + self.output_read / pp) / self.tp
        kv_read = b * context * self.kv_read_per_token_gpu + pf * self.kv_per_token_gpu  # read decode context, write prompts
        linear = 2.0 * tokens * self.mb.linear_active_per_token / (pp * self.tp)
        head = 2.0 * (b + np.minimum(pf, 1.0)) * m.hidden_size * m.vocab_size / (pp * self.tp)
        attention = 4.0 * m.q_width * ls * (b * context + pf * prefill_context) / self.tp
        compute = (linear + head) / self.rate + attention / self.attn_rate
        memory = weight_read / self.bw + kv_read / self.kv_bw
        comm = 2.0 * ls * self.allreduce_s(tokens * m.hidden_size * ACTIVATION_BYTES, cluster)
        stage = np.maximum(compute, memory) + comm
        send = np.where(pp > 1, (pp - 1.0) * 2.0 * self.hw.intra_node.latency_us * 1e-6, 0.0)
        total = micro * stage + np.where(micro < pp, (pp - micro) * stage, 0.0) + send + self.params.step_overhead_us * 1e-6
        total = total + decode * self.params.seq_overhead_us * 1e-6
        return total, compute > memory


def engine_for(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, params: ServingParams) -> _Engine:
    return _Engine(model, cluster, plans, params)


def max_batch_fit(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, params: ServingParams,
                  max_len: int) -> np.ndarray:
    """The largest number of ``max_len``-token sequences whose KV cache fits, per replica (0: weights alone do not fit)."""
    engine = _Engine(model, cluster, plans, params)
    return np.floor(engine.kv_capacity_tokens(cluster.hardware.memory_gib) / max_len).astype(np.int64)


def estimate_serving(model: ModelSpec, cluster: Cluster, workload: ServeWorkload, plans: ServePlanBatch,
                     params: ServingParams, *, batch_override: np.ndarray | None = None) -> ServeEstimate:
    """Estimate every serve plan.  ``batch_override`` pins the sequences in flight per replica
    (validation of max-throughput runs, where the engine, not the plan, picks the batch)."""
    hw = cluster.hardware
    eng = _Engine(model, cluster, plans, params)
    n = len(plans)
    I, O = float(workload.input_len), float(workload.output_len)
    replicas = plans.replicas.astype(np.float64)
    capacity_tokens = eng.kv_capacity_tokens(hw.memory_gib)
    fit = np.floor(capacity_tokens / workload.max_len).astype(np.int64)
    max_batch = plans.max_batch.astype(np.float64)
    reason = np.full(n, "", dtype=object)
    reason[fit < max_batch] = "max_batch exceeds the KV-cache capacity"
    reason[fit < 1] = "weights and reserve leave no room for one sequence's KV cache"
    fits = reason == ""
    limit = np.maximum(np.minimum(max_batch, fit), 1.0) if batch_override is None else np.asarray(batch_override, float)
    context = I + O / 2.0

    def round_s(batch: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return eng.step_s(batch, batch * I / O, np.full(n, context), np.full(n, I / 2.0), cluster)

    mode = workload.mode if batch_override is None else "max-throughput"
    stable = np.ones(n, dtype=bool)
    if mode == "concurrency":
        batch = np.minimum(workload.concurrency / replicas, limit)
    elif mode == "rate":
        lam = workload.request_rate / replicas
        t_max, _ = round_s(limit)
        capacity = limit / (t_max * O)  # requests/s one replica sustains at its batch limit
        stable = lam < capacity
        batch = np.minimum(np.maximum(lam * O * t_max, 1e-9), limit)
        for _ in range(40):  # Little's law: B = lambda * (O * TPOT(B) + TTFT), a contraction here
            t, _ = round_s(np.maximum(batch, 1.0))
            batch = np.minimum(lam * (O * t + t), limit)
        batch = np.where(stable, batch, limit)
    else:
        batch = limit
    decode_batch = np.maximum(batch, 1.0)
    t_round, compute_bound = round_s(decode_batch)
    # TTFT: the step that carries the whole prompt beside the running batch.
    t_first, _ = eng.step_s(decode_batch, np.full(n, I), np.full(n, context), np.full(n, I / 2.0), cluster)
    ttft = t_first
    if mode == "rate":
        rho = np.clip(lam / np.maximum(capacity, 1e-12), 0.0, 0.999)
        ttft = np.where(stable, t_first * (1.0 + rho / (2.0 * (1.0 - rho))), np.inf)
    tpot = t_round
    per_replica = decode_batch / t_round if mode != "rate" else np.where(stable, lam * O, limit / t_max)
    if mode == "concurrency":
        per_replica = np.minimum(per_replica, batch / t_round)
    total = per_replica * replicas
    per_user = 1.0 / tpot
    kv_used = np.minimum(np.ceil(np.maximum(max_batch if batch_override is None else limit, 1.0)), np.maximum(fit, 0)) \
        * workload.max_len * eng.kv_per_token_gpu
    weights_gib = eng.weights_per_gpu / GIB
    kv_gib = kv_used / GIB
    reserve_gib = np.full(n, params.reserve_gib)
    memory = weights_gib + kv_gib + reserve_gib
    misses = np.full(n, "", dtype=object)
    meets = fits & stable
    ttft_ms, tpot_ms = ttft * 1e3, tpot * 1e3
    if workload.ttft_ms is not None:
        miss = ttft_ms > workload.ttft_ms
        misses = np.where(miss, misses + _fmt_miss("TTFT", ttft_ms, workload.ttft_ms), misses)
        meets &= ~miss
    if workload.tpot_ms is not None:
        miss = tpot_ms > workload.tpot_ms
        misses = np.where(miss, misses + _fmt_miss("TPOT", tpot_ms, workload.tpot_ms), misses)
        meets &= ~miss
    if mode == "rate":
        misses = np.where(~stable, misses + np.array([f"rate {workload.request_rate:g}/s exceeds capacity "
                                                      f"{c * r:.3g}/s; " for c, r in zip(capacity, replicas)], dtype=object),
                          misses)
    misses = np.array([m.rstrip("; ") for m in misses], dtype=object)
    return ServeEstimate(
        output_tokens_per_s=total,
        output_tokens_per_s_per_gpu=total / cluster.n_gpus,
        tokens_per_s_per_user=per_user,
        ttft_ms=ttft_ms,
        tpot_ms=tpot_ms,
        batch=batch,
        max_batch_fit=np.maximum(fit, 0),
        memory_gib_per_gpu=memory,
        memory_breakdown_gib={"weights": weights_gib, "kv_cache": kv_gib, "reserve": reserve_gib},
        requests_per_s=total / O,
        fits=fits,
        meets_targets=meets,
        reason=reason,
        misses=misses,
        memory_capacity_gib=hw.memory_gib,
        bound=np.where(compute_bound, "compute", "memory").astype(object),
    )


def _fmt_miss(name: str, value: np.ndarray, target: float) -> np.ndarray:
    return np.array([f"{name} {v:,.0f} > {target:g} ms; " if np.isfinite(v) else f"{name} unbounded (overloaded); "
                     for v in value], dtype=object)


def static_batch_s(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, params: ServingParams,
                   batch: np.ndarray, input_len: int, output_len: int) -> np.ndarray:
    """Seconds for a static batch: prefill ``batch`` prompts at once, then ``output_len`` decode steps."""
    eng = _Engine(model, cluster, plans, params)
    n = len(plans)
    batch = np.asarray(batch, dtype=np.float64)
    zeros = np.zeros(n)
    t_prefill, _ = eng.step_s(zeros, batch * input_len, zeros, np.full(n, input_len / 2.0), cluster)
    steps = max(output_len - 1, 0)
    if not steps:
        return t_prefill
    # Decode time is linear in the context length, so the mean context gives the sum exactly.
    t_decode, _ = eng.step_s(batch, zeros, np.full(n, input_len + output_len / 2.0), zeros, cluster)
    return t_prefill + steps * t_decode
