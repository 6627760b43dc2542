"""Serving search: exact enumeration of the (small) serving space, ranked with the targets first.

Plans that meet every target (TTFT, TPOT, and a request rate the deployment sustains) rank
before those that miss one; within each set, higher output tokens/s wins (ties: less memory,
then the plan string, so the same inputs give the same order).  ``capacity_search`` finds the
fewest GPUs whose best plan serves a request rate within the targets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import ServeWorkload
from ..serving.estimate import ServingParams, estimate_serving, max_batch_fit
from ..serving.plan import SERVE_KEYS, ServePlan, ServePlanBatch
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


def _with_fit_batches(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch, params: ServingParams,
                      workload: ServeWorkload) -> ServePlanBatch:
    """Add, per layout and precision, the plan whose max_batch is the KV-cache-bound batch."""
    fit = max_batch_fit(model, cluster, plans, params, workload.max_len)
    key = np.stack([plans.tp, plans.pp, plans.ep, plans.weights, plans.kv], axis=1)
    _, first = np.unique(key, axis=0, return_index=True)
    extra = plans.take(first)
    extra_fit = fit[first]
    keep = extra_fit >= 1
    if not keep.any():
        return plans
    extra = extra.take(np.flatnonzero(keep))
    columns = {k: np.concatenate([getattr(plans, k), getattr(extra, k) if k != "max_batch" else extra_fit[keep]])
               for k in SERVE_KEYS}
    merged = ServePlanBatch.from_columns(plans.n_gpus, columns)
    _, unique = np.unique(np.stack([getattr(merged, k).astype(np.int64) for k in SERVE_KEYS], axis=1), axis=0,
                          return_index=True)
    return merged.take(np.sort(unique))


def serve_search(model: ModelSpec, cluster: Cluster, workload: ServeWorkload, space: ServeSpace,
                 params: ServingParams, *, top: int = 10) -> ServeSearchResult:
    started = time.perf_counter()
    enumeration = enumerate_serve(model, cluster, space)
    plans = enumeration.plans
    rejected = dict(enumeration.rejected)
    if len(plans) and enumeration.fit_batch:
        plans = _with_fit_batches(model, cluster, plans, params, workload)
    if not len(plans):
        return ServeSearchResult([], 0, enumeration.space_size, time.perf_counter() - started, rejected, 0, 0,
                                 cluster.n_gpus)
    est = estimate_serving(model, cluster, workload, plans, params)
    for reason, count in zip(*np.unique(est.reason[~est.fits].astype(str), return_counts=True)):
        rejected[str(reason)] = rejected.get(str(reason), 0) + int(count)
    fits = np.flatnonzero(est.fits)
    meets = est.meets_targets[fits]
    throughput = est.output_tokens_per_s[fits]
    memory = est.memory_gib_per_gpu[fits]
    order = np.lexsort((memory, -throughput, ~meets))
    ranked = []
    seen = 0
    for position, idx in enumerate(order[:top], start=1):
        i = int(fits[idx])
        ranked.append(RankedServePlan(position, plans.plan(i), est.row(i)))
        seen += 1
    # Stable tie-break by plan string among equal scores.
    ranked.sort(key=lambda r: (not r.estimate["meets_targets"], -round(r.estimate["output_tokens_per_s"], 6),
                               round(r.estimate["memory_gib_per_gpu"], 6), r.plan.as_string()))
    ranked = [RankedServePlan(k, r.plan, r.estimate) for k, r in enumerate(ranked, start=1)]
    return ServeSearchResult(ranked, len(plans), enumeration.space_size, time.perf_counter() - started, rejected,
                             int(len(fits)), int(meets.sum()), cluster.n_gpus)


def gpu_counts(low: int, high: int, gpus_per_node: int) -> list[int]:
    """GPU counts a deployment can use between low and high: any count within a node, whole nodes beyond."""
    return [n for n in range(low, high + 1) if n <= gpus_per_node or n % gpus_per_node == 0]


@dataclass
class CapacityResult:
    n_gpus: int | None
    result: ServeSearchResult | None
    tried: list[tuple[int, int]]  # (GPUs, plans meeting the targets)


def capacity_search(model: ModelSpec, hardware, gpus_per_node: int, low: int, high: int, workload: ServeWorkload,
                    space: ServeSpace, params: ServingParams, *, top: int = 10) -> CapacityResult:
    """The fewest GPUs in ``low..high`` whose best plan meets the targets at the workload's request rate."""
    tried = []
    for n in gpu_counts(low, high, gpus_per_node):
        cluster = Cluster(hardware=hardware, n_gpus=n, gpus_per_node=min(gpus_per_node, n))
        result = serve_search(model, cluster, workload, space, params, top=top)
        tried.append((n, result.meeting))
        if result.meeting:
            return CapacityResult(n, result, tried)
    return CapacityResult(None, None, tried)
