"""Serving search: exact enumeration of the serving space, ranked with the targets first.

Plans that meet every target (TTFT, TPOT, and a request rate the deployment sustains) rank before
those that miss one; within each set, higher output tokens/s wins (ties: fewer GPUs per replica, less
memory, then the plan string, so the same inputs give the same order).  Each plan is estimated on the
chosen engine (its memory rule and fitted parameters), and says whether the checkpoint can run it.
``capacity_search`` finds the fewest GPUs whose best plan serves a request rate within the targets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import ServeWorkload
from ..serving.checkpoint import how, requirement
from ..serving.engines import DEFAULT_ENGINE
from ..serving.estimate import ServingParams, add_serving_cost, estimate_serving, max_batch_fit
from ..serving.plan import WEIGHTS, ServePlan, ServePlanBatch
from ..serving.space import ServeSpace, enumerate_serve


@dataclass(frozen=True)
class RankedServePlan:
    rank: int
    plan: ServePlan
    estimate: dict[str, Any]

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "plan": self.plan.as_dict(), "estimate": self.estimate}


@dataclass
class ServeSearchResult:
    ranked: list[RankedServePlan]
    evaluations: int
    space_size: int
    elapsed_s: float
    rejected: dict[str, int]
    feasible: int
    meeting: int
    n_gpus: int
    notes: list[str] = field(default_factory=list)
    # plans meeting the targets that run from the checkpoint (the others need another one): what capacity counts
    meeting_runnable: int = 0

    def to_json(self) -> dict[str, Any]:
        return {
            "plans": [r.to_json() for r in self.ranked],
            "search": {
                "sampler": "exact",
                "evaluations": self.evaluations,
                "space_size": self.space_size,
                "elapsed_s": self.elapsed_s,
                "rejected": dict(sorted(self.rejected.items(), key=lambda kv: -kv[1])),
                "feasible": self.feasible,
                "meeting_targets": self.meeting,
                "objectives": ["meets_targets", "output_tokens_per_s"],
                "pareto": False,
            },
        }


def with_fit_batches(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, workload: ServeWorkload,
                      engine: str, memory_fraction: float | None = None) -> ServePlanBatch:
    """Add, per layout and precision, the plan whose max_batch is the largest the engine's KV budget holds at that
    max_batch.  The budget shrinks as max_batch grows (activations, CUDA graphs and sampler buffers are sized for
    it), so the fit worked out at a smaller batch can be more than the engine then holds: the largest multiple b of
    the decode ranks with fit(b) >= b is found by bisection (fit falls as b grows, so the condition holds below it
    and fails above).  Under a concurrency the engine's share of the users is added too (at most the fit)."""
    key = plans.key_matrix()
    key[:, -1] = 0  # max_batch
    _, first = np.unique(key, axis=0, return_index=True)
    extra = plans.take(first)
    dp = extra.d_dp.astype(np.int64)

    def fit_at(units):  # sequences the budget holds with max_batch = units * dp
        return max_batch_fit(model, cluster, extra.with_column("max_batch", units * dp), workload.max_len, engine,
                             fraction=memory_fraction)

    lo = np.ones(len(extra), dtype=np.int64)  # one sequence per decode rank
    smallest = fit_at(lo)
    keep = smallest >= dp
    if not keep.any():
        return plans
    hi = np.maximum(smallest // dp, 1) + 1  # the fit at the smallest batch bounds it: hi fails
    while np.any(hi - lo > 1):
        mid = (lo + hi) // 2
        holds = fit_at(mid) >= mid * dp
        lo = np.where(holds, mid, lo)
        hi = np.where(holds, hi, mid)
    extra = extra.take(np.flatnonzero(keep))
    fit = (lo * dp)[keep]
    added = [extra.with_column("max_batch", fit)]
    if workload.mode == "concurrency" and workload.concurrency:
        # under a closed loop of C users a decode engine never holds more than its share of them: a limit at that
        # share (a whole number per rank) serves the same load as the fit, with the smaller reserve that SGLang's
        # CUDA-graph rule (per rank, times the attention-DP width) and the sampler size for the limit
        engines = (extra.replicas * extra.d_workers).astype(np.int64)
        ranks = extra.d_dp.astype(np.int64)
        share = -(-int(workload.concurrency) // np.maximum(engines, 1))
        added.append(extra.with_column("max_batch", np.minimum(fit, -(-share // ranks) * ranks)))
    merged = ServePlanBatch.concat(plans.n_gpus, [plans, *added])
    _, unique = np.unique(merged.key_matrix(), axis=0, return_index=True)
    return merged.take(np.sort(unique))


def annotate_checkpoint(estimate: dict[str, Any], plan: ServePlan, checkpoint: str, engine: str,
                        is_moe: bool = True, *, fp4_cores: bool) -> dict[str, Any]:
    """Say how the plan's weights come from the checkpoint (and what it needs when they cannot); ``fp4_cores``:
    the GPU has FP4 tensor cores (``checkpoint.how``)."""
    out = dict(estimate)
    out["checkpoint"] = checkpoint
    out["weights_from"] = how(plan.weights, checkpoint, engine, is_moe, fp4_cores=fp4_cores)
    need = requirement(plan.weights, checkpoint, engine, is_moe, fp4_cores=fp4_cores)
    if need:
        out["needs_checkpoint"] = need
    return out


def _latency(value: Any) -> float:
    """A row's latency as a number (a row may hold None for an unbounded one)."""
    return float("inf") if value is None else float(value)


def _reply_ms(ttft_ms: Any, tpot_ms: Any, workload: ServeWorkload) -> np.ndarray:
    """A request's whole latency, TTFT + (output - 1) x TPOT, rounded to 1% (plans about as fast tie, and rank by
    the keys after it); infinite for an unbounded latency."""
    with np.errstate(invalid="ignore", over="ignore"):
        total = np.asarray(ttft_ms, float) + max(workload.output_len - 1, 0) * np.asarray(tpot_ms, float)
        return np.where(np.isfinite(total), np.round(np.log(np.maximum(total, 1e-9)) / np.log(1.01)), np.inf)


def miss_score(ttft_ms: Any, tpot_ms: Any, workload: ServeWorkload) -> np.ndarray:
    """How far plans are from the latency targets: the sum, over the stated targets, of log(value / target) where
    the value is above it (0 for a plan that meets them; infinite for an unbounded latency), rounded to 1% so that
    plans about as close rank by throughput.  Plans that miss rank by it: the closest first."""
    score = np.zeros(np.shape(np.asarray(ttft_ms, float)))
    for value, target in ((ttft_ms, workload.ttft_ms), (tpot_ms, workload.tpot_ms)):
        if target is None:
            continue
        v = np.asarray(value, float)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            over = np.where(np.isfinite(v), np.log(np.maximum(v, 1e-300) / target), np.inf)
        score = score + np.maximum(over, 0.0)
    return np.round(score, 2)


def _distinct_key(r: RankedServePlan) -> tuple:
    """A plan that differs from a better-ranked one only in a max_batch the load never reaches (same layout,
    precisions and estimates) is the same deployment: under a concurrency below both limits a larger limit only
    costs memory, and ten copies of one layout would fill the table."""
    e = r.estimate
    return (tuple((k, v) for k, v in r.plan.as_dict().items() if k != "max_batch"),
            *(float(f"{e[k]:.6g}") if e[k] is not None else None
              for k in ("output_tokens_per_s", "ttft_ms", "tpot_ms", "meets_targets")))


def serve_search(model: ModelSpec, cluster: Cluster, workload: ServeWorkload, space: ServeSpace,
                 params: ServingParams, *, top: int = 10, engine: str = DEFAULT_ENGINE,
                 checkpoint: str = "bf16", memory_fraction: float | None = None) -> ServeSearchResult:
    """Rank the space's plans on ``engine`` (``memory_fraction``: the engine's memory flag as the user sets it;
    None: the engine's default rule)."""
    started = time.perf_counter()
    enumeration = enumerate_serve(model, cluster, space, engine=engine, checkpoint=checkpoint)
    plans = enumeration.plans
    rejected = dict(enumeration.rejected)
    space_size = enumeration.space_size
    if len(plans) and enumeration.fit_batch:
        # the choice ``max_batch: fit`` becomes one plan per valid layout: count those in the space too
        before = len(plans)
        plans = with_fit_batches(model, cluster, plans, workload, engine, memory_fraction)
        space_size += len(plans) - before
    if not len(plans):
        return ServeSearchResult([], 0, space_size, time.perf_counter() - started, rejected, 0, 0,
                                 cluster.n_gpus)
    est = estimate_serving(model, cluster, workload, plans, params, engine=engine, memory_fraction=memory_fraction)
    for reason, count in zip(*np.unique(est.reason[~est.fits].astype(str), return_counts=True)):
        rejected[str(reason)] = rejected.get(str(reason), 0) + int(count)
    fits = np.flatnonzero(est.fits)
    meets = est.meets_targets[fits]
    moe, fp4_cores = model.is_moe, cluster.hardware.supports("fp4")
    runnable = np.array([how(WEIGHTS[int(w)], checkpoint, engine, moe, fp4_cores=fp4_cores) != "needs"
                         for w in plans.weights[fits]],
                        dtype=bool)  # bool even when no plan fits (an empty array is float otherwise)
    throughput = np.round(est.output_tokens_per_s[fits], 6)
    memory = est.memory_gib_per_gpu[fits]
    width = plans.gpus_per_replica[fits]
    miss = miss_score(est.ttft_ms[fits], est.tpot_ms[fits], workload)  # 0 for the plans that meet the targets
    # at equal throughput (under a request rate every stable plan serves the rate) the faster reply ranks first: a
    # request's whole latency, then the fewest GPUs per replica and the least memory
    reply = _reply_ms(est.ttft_ms[fits], est.tpot_ms[fits], workload)
    order = np.lexsort((memory, width, reply, -throughput, miss, ~runnable, ~meets))
    # walk the whole order: plans that differ only in an unreached max_batch fall out (_distinct), and --top counts
    # distinct ones
    ranked, seen = [], set()
    for i in order:
        r = RankedServePlan(0, plans.plan(int(fits[i])), est.row(int(fits[i])))
        key = _distinct_key(r)
        if key in seen:
            continue
        seen.add(key)
        ranked.append(r)
        if len(ranked) >= top * 4:
            break
    ranked.sort(key=lambda r: (not r.estimate["meets_targets"],
                               how(r.plan.weights, checkpoint, engine, moe, fp4_cores=fp4_cores) == "needs",
                               float(miss_score(_latency(r.estimate["ttft_ms"]), _latency(r.estimate["tpot_ms"]),
                                                workload)),
                               -round(r.estimate["output_tokens_per_s"], 6),
                               float(_reply_ms(_latency(r.estimate["ttft_ms"]), _latency(r.estimate["tpot_ms"]),
                                               workload)), r.plan.gpus_per_replica,
                               round(r.estimate["memory_gib_per_gpu"], 6), r.plan.as_string()))
    price = cluster.hardware.price_usd_per_gpu_hour
    ranked = [RankedServePlan(k, r.plan, add_serving_cost(annotate_checkpoint(r.estimate, r.plan, checkpoint, engine, moe,
                                                                              fp4_cores=fp4_cores),
                                                          cluster.n_gpus, price))
              for k, r in enumerate(ranked[:top], start=1)]
    return ServeSearchResult(ranked, len(plans), space_size, time.perf_counter() - started, rejected,
                             int(len(fits)), int(meets.sum()), cluster.n_gpus,
                             meeting_runnable=int((meets & runnable).sum()))


def gpu_counts(low: int, high: int, gpus_per_node: int) -> list[int]:
    """GPU counts a deployment can use between low and high: any count within a node, whole nodes beyond."""
    return [n for n in range(low, high + 1) if n <= gpus_per_node or n % gpus_per_node == 0]


@dataclass
class CapacityResult:
    n_gpus: int | None
    result: ServeSearchResult | None
    tried: list[tuple[int, int]]  # (GPUs, plans meeting the targets that run from the checkpoint)


def capacity_search(model: ModelSpec, hardware, gpus_per_node: int, low: int, high: int, workload: ServeWorkload,
                    space: ServeSpace, params: ServingParams, *, top: int = 10, engine: str = DEFAULT_ENGINE,
                    checkpoint: str = "bf16", memory_fraction: float | None = None) -> CapacityResult:
    """The fewest GPUs in ``low..high`` whose best plan meets the targets at the workload's request rate, with
    weights that run from ``checkpoint`` (a plan that needs another checkpoint does not count).

    Counts within a node are tried in turn.  Beyond a node the counts are whole nodes.  A count that meets
    the targets keeps meeting them at twice the count (twice its replicas, each with half the rate; no such
    rule holds for any larger count, since a replica of several nodes must divide the count), so the node
    counts double from the smallest until one meets (the largest count is tried last), and the counts between
    that one and the last that failed are then tried in turn.  A rate that no count of the range serves costs
    about log2(nodes) searches instead of one per node.  Exact when the meeting plans' replicas are a power of
    two GPUs (every aggregated layout); a disaggregated replica of another size (3 prefill + 1 decode GPUs) at
    a count no doubling reaches can be missed."""
    tried: dict[int, int] = {}
    results: dict[int, ServeSearchResult] = {}

    def meets(n: int) -> bool:
        if n not in results:
            cluster = Cluster(hardware=hardware, n_gpus=n, gpus_per_node=min(gpus_per_node, n))
            results[n] = serve_search(model, cluster, workload, space, params, top=top, engine=engine,
                                      checkpoint=checkpoint, memory_fraction=memory_fraction)
            tried[n] = results[n].meeting_runnable
        # a plan that needs another checkpoint than --checkpoint does not serve the rate with the weights at hand
        return bool(results[n].meeting_runnable)

    def done(n: int | None) -> CapacityResult:
        return CapacityResult(n, results[n] if n is not None else None, sorted(tried.items()))

    counts = gpu_counts(low, high, gpus_per_node)
    for n in (c for c in counts if c <= gpus_per_node):
        if meets(n):
            return done(n)
    nodes = [c for c in counts if c > gpus_per_node]
    if not nodes:
        return done(None)
    probes = [nodes[0] * 2 ** k for k in range(64) if nodes[0] * 2 ** k <= nodes[-1]]
    if probes[-1] != nodes[-1]:
        probes.append(nodes[-1])
    failed = None
    for probe in probes:
        if meets(probe):
            for n in nodes:  # the counts between the last probe that failed and this one, in turn
                if (failed is None or n > failed) and n < probe and meets(n):
                    return done(n)
            return done(probe)
        failed = probe
    return done(None)
