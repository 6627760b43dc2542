"""The report's use of Optuna: per-trial histories, parameter importance, and reading a stored study.

Part of the Optuna adapter (with ``optuna_search.py``, whose samplers it reuses, and
``optuna_study.py``, whose storages it opens): the report asks it for these and imports
no optuna itself.  Each axis of the space is
one categorical parameter; an invalid plan or one that does not fit is reported to
the sampler through Optuna's constraints API and recorded as infeasible (None).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import optuna

from ..errors import InputError
from ..training.plan import PLAN_KEYS, PlanBatch
from ..training.problem import Objective, TrainingProblem
from .optuna_search import make_sampler
from .result import Evaluated

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
        overshoot = float(est.memory_gib_per_gpu[0] - est.memory_capacity_gib * (1.0 - problem.memory_headroom))
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


def importances(rows: Sequence[dict[str, Any]], values: np.ndarray, choices: dict[str, list], direction: str,
                what: str = "randomly drawn plans that fit") -> tuple[dict[str, float], str]:
    """Optuna's PED-ANOVA importance of each axis over the given (plan, objective value) pairs."""
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    distributions = {k: optuna.distributions.CategoricalDistribution(v) for k, v in choices.items()}
    study = optuna.create_study(direction=direction)
    study.add_trials([optuna.trial.create_trial(params=row, distributions=distributions, value=float(v))
                      for row, v in zip(rows, values)])
    evaluator = optuna.importance.PedAnovaImportanceEvaluator()
    result = optuna.importance.get_param_importances(study, evaluator=evaluator)
    return ({k: float(v) for k, v in result.items()},
            f"Optuna PED-ANOVA importance over {len(rows):,} {what}")


# --- a stored study (``autotune report --storage URL --study NAME``) ------------------------


@dataclass
class StoredStudy:
    """What the report needs from a study that ``autotune search`` or ``autotune tune`` kept in a storage."""

    name: str
    storage: str  # the URL, password hidden
    problem: TrainingProblem
    objectives: tuple[Objective, ...]
    settings: dict[str, Any]  # mode (search | tune), sampler, ...
    target: int | None
    records: list[dict[str, Any]]  # every trial, as ``optuna_study.trial_records`` gives them
    evaluated: Evaluated  # every distinct plan the trials evaluated, re-estimated
    exact: dict[str, Any] | None = None  # an exact search kept in the study: its counts (``autotune.exact``)

    @property
    def measured(self) -> bool:
        return self.settings.get("mode") == "tune"


def read_study(url: str, name: str) -> StoredStudy:
    """Open study ``name`` in ``url`` and rebuild its problem from the fingerprint it carries."""
    from .fingerprint import problem_from_fingerprint
    from .optuna_study import (
        EXACT_ATTR,
        PROBLEM_ATTR,
        SETTINGS_ATTR,
        TARGET_ATTR,
        check_stored_records,
        evaluated_from_study,
        make_storage,
        redact,
        trial_records,
    )

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    storage = make_storage(url, existing=True, reading=True)  # a report writes nothing to the study
    try:
        names = sorted(optuna.study.get_all_study_names(storage))
    except Exception as exc:  # noqa: BLE001  (a file that is not an Optuna storage, a server that went away)
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise InputError(f"cannot read studies from {redact(url)}: {first}; check the URL", field="--storage") from None
    if name not in names:
        create = "create it with `autotune search ... --storage URL --study NAME` (or `autotune tune`)"
        if names:
            held = ", ".join(repr(n) for n in names[:10]) + (f" and {len(names) - 10} more" if len(names) > 10 else "")
            fix = f"it holds {held}: give one of those with --study, or {create}"
        else:
            fix = f"it holds no study: check --storage, or {create}"
        raise InputError(f"no study {name!r} in {redact(url)}; {fix}", field="--study")
    study = optuna.load_study(study_name=name, storage=storage)
    attrs = study.user_attrs
    if PROBLEM_ATTR not in attrs:
        raise InputError(f"study {name!r} in {redact(url)} was not made by autotune (it has no {PROBLEM_ATTR!r} "
                         "record of its problem); give a study that `autotune search --storage` or `autotune tune` "
                         "wrote", field="--study")
    check_stored_records(attrs, name)
    problem, objectives = problem_from_fingerprint(attrs[PROBLEM_ATTR], study=name)
    target = attrs.get(TARGET_ATTR)
    return StoredStudy(name=name, storage=redact(url), problem=problem, objectives=objectives,
                       settings=dict(attrs.get(SETTINGS_ATTR) or {}), target=int(target) if target else None,
                       records=trial_records(study), evaluated=evaluated_from_study(study, problem),
                       exact=attrs.get(EXACT_ATTR) if isinstance(attrs.get(EXACT_ATTR), dict) else None)
