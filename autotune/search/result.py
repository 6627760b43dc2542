"""Search results: every evaluated plan, ranked by the objectives."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

import numpy as np

from ..training.estimate import TrainingEstimate
from ..training.plan import Plan, PlanBatch
from ..training.problem import Objective, TrainingProblem

OUT_OF_MEMORY = "out of memory"
# Plans whose estimates agree in step time and memory to 9 significant digits (round_rel) are the same
# answer (e.g. TP8 DP8 and TP8 CP2 DP4 at twice the micro-batch, when the CP exchange hides behind
# attention): they collapse into one row that names the others.
MAX_EQUIVALENTS = 20  # named per row, at most


def simplicity(plan: Plan) -> tuple:
    """Sort key, simplest first: fewer parallel dimensions, lower ZeRO stage, no offload, no
    interleaving, no recompute, then smaller degrees and micro-batches."""
    dims = sum(d > 1 for d in (plan.tp, plan.pp, plan.cp, plan.ep)) + (plan.vp > 1)
    return (dims, plan.zero, plan.offload != "none", plan.vp, plan.recompute != "none", plan.cp, plan.ep, plan.pp,
            plan.tp, plan.sp, plan.mbs, plan.as_string())


@dataclass
class Evaluated:
    """The plans a search evaluated (in chunks), with the space's size and rejections by reason."""

    estimates: list[tuple[PlanBatch, TrainingEstimate]]
    space_size: int
    rejected: dict[str, int]
    evaluations: int


@dataclass(frozen=True)
class RankedPlan:
    rank: int
    plan: Plan
    estimate: dict[str, Any]
    objective_values: dict[str, float]
    equivalents: tuple[Plan, ...] = ()  # other plans with the same estimate (simplest first)

    def to_json(self) -> dict[str, Any]:
        return {"rank": self.rank, "plan": self.plan.as_dict(), "estimate": self.estimate,
                "equivalents": [p.as_dict() for p in self.equivalents]}


@dataclass(frozen=True)
class SearchResult:
    ranked: list[RankedPlan]
    sampler: str
    evaluations: int
    space_size: int
    elapsed_s: float
    rejected: dict[str, int]
    objectives: tuple[Objective, ...]
    feasible: int
    pareto: bool = False
    notes: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        return {
            "plans": [r.to_json() for r in self.ranked],
            "search": {
                "sampler": self.sampler,
                "evaluations": self.evaluations,
                "space_size": self.space_size,
                "elapsed_s": self.elapsed_s,
                "rejected": dict(sorted(self.rejected.items(), key=lambda kv: -kv[1])),
                "feasible": self.feasible,
                "objectives": [o.name for o in self.objectives],
                "pareto": self.pareto,
            },
        }


def pareto_mask(scores: np.ndarray) -> np.ndarray:
    """Non-dominated rows of ``scores`` (n x k, larger is better in every column)."""
    n = scores.shape[0]
    keep = np.ones(n, dtype=bool)
    order = np.argsort(-scores[:, 0], kind="stable")
    for idx in order:
        if not keep[idx]:
            continue
        dominated = np.all(scores <= scores[idx], axis=1) & np.any(scores < scores[idx], axis=1)
        keep &= ~dominated
    return keep


def rank(evaluated: Evaluated, problem: TrainingProblem, objectives: Sequence[Objective], top: int) -> tuple[list[RankedPlan], int, dict[str, int]]:
    """The best ``top`` feasible plans (the Pareto set with several objectives), best first."""
    rejected = dict(evaluated.rejected)
    candidates = []  # (batch, estimate, index array, scores)
    feasible_total = 0
    for batch, est in evaluated.estimates:
        fits = np.flatnonzero(problem.fits(est))
        oom = len(batch) - len(fits)
        if oom:
            rejected[OUT_OF_MEMORY] = rejected.get(OUT_OF_MEMORY, 0) + oom
        feasible_total += len(fits)
        if len(fits):
            scores = np.stack([o.sign * o.value(est, problem)[fits] for o in objectives], axis=1)
            candidates.append((batch, est, fits, scores))
    if not candidates:
        return [], 0, rejected
    picked = []
    for batch, est, fits, scores in candidates:
        # Keep each chunk's best few (or its Pareto set) before the global ranking; with ties, keep
        # enough to fill `top` distinct estimates and to name their equivalents.
        if len(objectives) == 1:
            order = np.argsort(-scores[:, 0], kind="stable")[: top * (MAX_EQUIVALENTS + 1)]
        else:
            order = np.flatnonzero(pareto_mask(scores))
        for i in order:
            picked.append((tuple(scores[i]), batch, est, int(fits[i])))
    if len(objectives) > 1:
        all_scores = np.array([p[0] for p in picked])
        mask = pareto_mask(all_scores)
        picked = [p for p, keep in zip(picked, mask) if keep]
    # Identical estimates (step time and memory) form one row, represented by its simplest plan; rows
    # go best first, ties between different estimates to the one with more memory headroom.
    groups: dict[tuple, list] = {}
    for entry in picked:
        scores, batch, est, i = entry
        key = (tuple(round_rel(x) for x in scores), round_rel(float(est.step_time_s[i])),
               round_rel(float(est.memory_gib_per_gpu[i])))
        groups.setdefault(key, []).append(entry)
    rows = []
    for members in groups.values():
        plans = sorted(((simplicity(b.plan(i)), b.plan(i), (sc, b, e, i)) for sc, b, e, i in members),
                       key=lambda m: m[0])
        head = plans[0][2]
        rows.append((head, tuple(p for _, p, _ in plans[1:MAX_EQUIVALENTS + 1])))
    rows.sort(key=lambda r: (tuple(-x for x in r[0][0]), float(r[0][2].memory_gib_per_gpu[r[0][3]]),
                             simplicity(r[0][1].plan(r[0][3]))))
    ranked = []
    for position, ((scores, batch, est, i), equivalents) in enumerate(rows[:top], start=1):
        values = {o.name: float(o.sign * s) for o, s in zip(objectives, scores)}
        ranked.append(RankedPlan(rank=position, plan=batch.plan(i), estimate=est.row(i), objective_values=values,
                                 equivalents=equivalents))
    return ranked, feasible_total, rejected


def round_rel(x: float) -> float:
    """``x`` to about 9 significant digits: equal estimates compare equal despite float noise."""
    return float(f"{x:.9g}")
