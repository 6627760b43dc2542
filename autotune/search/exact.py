"""Exact search: evaluate every valid plan of the space with the vectorised cost model."""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..training.problem import TrainingProblem
from ..training.space import NOT_EXPRESSIBLE, REASONS, enumerate_valid
from .result import Evaluated

CHUNK = 200_000  # plans per cost-model call: bounds memory on very large spaces


def exact_search(problem: TrainingProblem, progress: Callable[[int, int], None] | None = None) -> Evaluated:
    enumeration = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                                  problem.framework)
    plans = enumeration.plans
    rejected = dict(enumeration.rejected)
    if problem.express is not None and len(plans):
        keep = problem.express(plans)
        if (~keep).any():
            reason = REASONS[NOT_EXPRESSIBLE]
            rejected[reason] = rejected.get(reason, 0) + int((~keep).sum())
            plans = plans.take(np.flatnonzero(keep))
    total = len(plans)
    estimates = []
    for start in range(0, max(total, 1), CHUNK):
        chunk = plans.take(np.arange(start, min(start + CHUNK, total)))
        if len(chunk):
            estimates.append((chunk, problem.evaluate(chunk)))
        if progress:
            progress(min(start + CHUNK, total), total)
    return Evaluated(estimates=estimates, space_size=enumeration.space_size, rejected=rejected,
                     evaluations=total)
