"""The report's use of Optuna: per-trial histories for the convergence figure, and parameter importance.

Part of the Optuna adapter (with ``optuna_search.py``, whose samplers it reuses): the
report asks it for these and imports no optuna itself.  Each axis of the space is
one categorical parameter; an invalid plan or one that does not fit is reported to
the sampler through Optuna's constraints API and recorded as infeasible (None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import optuna

from ..plan import PLAN_KEYS, PlanBatch
from .optuna_search import make_sampler
from .problem import Objective, TrainingProblem

_WORST = {"maximize": 0.0, "minimize": 1e30}


def run_and_record(problem: TrainingProblem, objective: Objective, sampler: str, trials: int, seed: int,
                   progress: Callable[[int, int], None] | None = None) -> list[float | None]:
    """The objective value of each of ``trials`` evaluations in order; None where the plan is infeasible."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    choices = problem.choices
    derive_sp = problem.rules.sp_with_tp and set(choices["sp"]) == {False, True}
    varying = [k for k in PLAN_KEYS if len(choices[k]) > 1 and not (k == "sp" and derive_sp)]
    fixed = {k: choices[k][0] for k in PLAN_KEYS if len(choices[k]) == 1}
    study = optuna.create_study(direction=objective.direction, sampler=make_sampler(sampler, seed, 1))
    values: list[float | None] = []

    def evaluate(trial: optuna.Trial) -> float:
        fields = dict(fixed)
        for key in varying:
            fields[key] = trial.suggest_categorical(key, list(choices[key]))
        if derive_sp:
            fields["sp"] = fields["tp"] > 1
        batch = PlanBatch.from_columns(problem.cluster.n_gpus, {k: [fields[k]] for k in PLAN_KEYS})
        if int(problem.reasons(batch)[0]):
            trial.set_constraint("invalid", 1.0)
            trial.set_constraint("memory_overshoot_gib", 0.0)
            values.append(None)
            return _WORST[objective.direction]
        est = problem.evaluate(batch)
        overshoot = float(est.memory_gib_per_gpu[0] - est.memory_capacity_gib)
        trial.set_constraint("invalid", 0.0)
        trial.set_constraint("memory_overshoot_gib", overshoot)
        value = float(objective.value(est, problem)[0])
        values.append(value if overshoot <= 0 else None)
        return value if overshoot <= 0 else _WORST[objective.direction]

    def callback(study: optuna.Study, trial: optuna.trial.FrozenTrial) -> None:
        if progress:
            progress(trial.number + 1, trials)

    study.optimize(evaluate, n_trials=trials, callbacks=[callback])
    return values


def importances(rows: Sequence[dict[str, Any]], values: np.ndarray, choices: dict[str, list], direction: str
                ) -> tuple[dict[str, float], str]:
    """Optuna's PED-ANOVA importance of each axis over the given (plan, objective value) pairs."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {k: optuna.distributions.CategoricalDistribution(v) for k, v in choices.items()}
    study = optuna.create_study(direction=direction)
    study.add_trials([optuna.trial.create_trial(params=row, distributions=distributions, value=float(v))
                      for row, v in zip(rows, values)])
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    result = optuna.importance.get_param_importances(study, evaluator=evaluator)
    return ({k: float(v) for k, v in result.items()},
            f"Optuna PED-ANOVA importance over {len(rows):,} randomly drawn plans that fit")
