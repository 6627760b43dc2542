"""Bayesian and random search through Optuna.  The only module of autotune that imports optuna.

Each axis of the space is one ``suggest_categorical`` whose choices are fixed for
the whole study (axes with a single choice are not suggested at all).  An
invalid plan and a plan that does not fit in memory both go to the sampler
through Optuna's constraints API (``Trial.set_constraint``): ``invalid`` is 1 for
a plan that breaks a validity rule and ``memory_overshoot_gib`` is how far a plan
misses the GPU's memory, so the sampler learns both.  With the space rule
``sp_with_tp``, sp is derived from tp rather than suggested.  The study's own trials are the cache: a plan the
sampler proposes again is answered from its first evaluation.
"""

from __future__ import annotations

from typing import Callable, Sequence

import numpy as np
import optuna

from ..training.plan import PLAN_KEYS, PlanBatch
from ..training.problem import Objective, TrainingProblem
from ..training.space import REASONS, space_size
from .result import Evaluated

SAMPLERS = ("tpe", "gp", "random")
_WORST = {"maximize": 0.0, "minimize": 1e30}


def make_sampler(name: str, seed: int | None, n_objectives: int) -> optuna.samplers.BaseSampler:
    if name == "tpe":
        return optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=20)
    if name == "random":
        return optuna.samplers.RandomSampler(seed=seed)
    if name == "gp":
        try:
            import torch  # noqa: F401  (Optuna's GPSampler needs it)
        except ImportError:
            raise ValueError("--sampler gp needs PyTorch (pip install 'autotune[gp]' or pip install torch); "
                             "use --sampler tpe instead") from None
        if n_objectives > 1:
            raise ValueError("--sampler gp handles one objective; use --sampler tpe for several")
        return optuna.samplers.GPSampler(seed=seed)
    raise ValueError(f"sampler must be one of {', '.join(SAMPLERS)}, but got ({name!r})")


def optuna_search(
    problem: TrainingProblem,
    objectives: Sequence[Objective],
    sampler_name: str,
    trials: int,
    seed: int | None,
    progress: Callable[[int, int], None] | None = None,
) -> Evaluated:
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices = problem.choices
    derive_sp = problem.rules.sp_with_tp and set(choices["sp"]) == {False, True}
    varying = [k for k in PLAN_KEYS if len(choices[k]) > 1 and not (k == "sp" and derive_sp)]
    fixed = {k: choices[k][0] for k in PLAN_KEYS if len(choices[k]) == 1}
    study = optuna.create_study(
        directions=[o.direction for o in objectives],
        sampler=make_sampler(sampler_name, seed, len(objectives)),
    )
    cache: dict[tuple, tuple[list[float], tuple[float, float], int]] = {}
    valid_plans: list[dict] = []

    def objective(trial: optuna.Trial):
        fields = dict(fixed)
        for key in varying:
            fields[key] = trial.suggest_categorical(key, list(choices[key]))
        if derive_sp:
            fields["sp"] = fields["tp"] > 1
        key = tuple(fields[k] for k in PLAN_KEYS)
        if key not in cache:
            batch = PlanBatch.from_columns(problem.cluster.n_gpus, {k: [fields[k]] for k in PLAN_KEYS})
            reason = int(problem.reasons(batch)[0])
            if reason:
                values = [_WORST[o.direction] for o in objectives]
                cache[key] = (values, (1.0, 0.0), reason)
            else:
                est = problem.evaluate(batch)
                values = [float(o.value(est, problem)[0]) for o in objectives]
                overshoot = float(est.memory_gib_per_gpu[0] - est.memory_capacity_gib * (1.0 - problem.memory_headroom))
                cache[key] = (values, (0.0, overshoot), 0)
                valid_plans.append(fields)
        values, constraints, reason = cache[key]
        trial.set_constraint("invalid", constraints[0])
        trial.set_constraint("memory_overshoot_gib", constraints[1])
        if reason:
            trial.set_user_attr("rejected", REASONS[reason])
        return values if len(values) > 1 else values[0]

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if progress:
            progress(trial.number + 1, trials)

    study.optimize(objective, n_trials=trials, callbacks=[callback])

    rejected: dict[str, int] = {}
    for _, _, reason in cache.values():
        if reason:
            rejected[REASONS[reason]] = rejected.get(REASONS[reason], 0) + 1
    estimates = []
    if valid_plans:
        batch = PlanBatch.from_columns(
            problem.cluster.n_gpus, {k: np.array([p[k] for p in valid_plans], dtype=object) for k in PLAN_KEYS}
        )
        estimates.append((batch, problem.evaluate(batch)))
    return Evaluated(estimates=estimates, space_size=space_size(choices), rejected=rejected, evaluations=len(cache))
