"""Search over plans: exact (every valid plan) or an Optuna sampler; ``run_search`` picks and ranks."""

from __future__ import annotations

import time
from typing import Callable, Sequence

import numpy as np

from ..training.problem import OBJECTIVES, Objective, TrainingProblem, parse_objectives
from ..training.space import LAYOUT_KEYS, SETTING_KEYS, enumerate_valid
from .exact import exact_search
from .result import RankedPlan, SearchResult, pareto_mask, rank

SAMPLER_CHOICES = ("auto", "exact", "tpe", "gp", "random")
# `auto` evaluates every valid plan when there are at most this many: the vectorised
# model does several hundred thousand plans per second on one core.
EXACT_LIMIT = 3_000_000


def count_valid_upper_bound(problem: TrainingProblem) -> int:
    """Valid layouts times all settings combinations: an upper bound on valid plans, cheap to get."""
    layouts_only = {k: problem.choices[k] for k in LAYOUT_KEYS}
    one_setting = {k: problem.choices[k][:1] for k in SETTING_KEYS}
    enumeration = enumerate_valid(problem.model, problem.cluster, problem.workload, {**layouts_only, **one_setting},
                                  problem.rules, problem.framework)
    settings = int(np.prod([len(problem.choices[k]) for k in SETTING_KEYS]))
    # Layouts that passed every rule with the first settings row.
    layouts = enumeration.space_size - sum(enumeration.rejected.values())
    return max(layouts, 0) * settings


def valid_plan_count(problem: TrainingProblem, trials: int, bound: int | None = None) -> int | None:
    """The number of valid plans when it is below ``trials`` (None otherwise): counted exactly only where the cheap
    upper bound (``bound``, or :func:`count_valid_upper_bound`) is below ``trials``, so at most that many."""
    bound = count_valid_upper_bound(problem) if bound is None else bound
    if bound >= trials:
        return None
    valid = len(enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                                problem.framework).plans)
    return valid if valid < trials else None


def run_search(
    problem: TrainingProblem,
    objectives: Sequence[Objective],
    *,
    sampler: str = "auto",
    trials: int = 200,
    seed: int | None = 0,
    top: int = 10,
    progress: Callable[[str, int, int], None] | None = None,
    storage: str | None = None,
    study: str | None = None,
    new: bool = False,
    heartbeat_s: int | None = None,
) -> SearchResult:
    """Search the problem's space and rank the feasible plans, best first.

    With ``storage`` (an Optuna storage URL) and ``study``, the trials persist: a re-run continues
    the study up to ``trials`` finished trials in total, and ``autotune worker`` processes may join it.
    ``auto`` still evaluates every plan when the space is small (and keeps the result in the study:
    its counts and its top plans as trials); a study already searched with a sampler continues with it.
    """
    if sampler not in SAMPLER_CHOICES:
        raise ValueError(f"sampler must be one of {', '.join(SAMPLER_CHOICES)}, but got ({sampler!r})")
    started = time.perf_counter()
    chosen = sampler
    notes = []
    store = None
    if storage is not None:
        from ..errors import InputError
        from .optuna_study import make_storage, stored_sampler

        if not study:
            raise InputError("--storage needs a study name, e.g. --study llama70b-64xh100", field="--study")
        store = make_storage(storage, heartbeat_s=heartbeat_s)
        if sampler == "auto":
            previous = None if new else stored_sampler(store, study)
            if previous in SAMPLER_CHOICES and previous not in ("auto", "exact"):
                chosen = previous
                notes.append(f"auto continues study {study!r} with its sampler, {previous}")
    bound = None
    if sampler == "auto" and chosen == "auto":
        bound = count_valid_upper_bound(problem)
        chosen = "exact" if bound <= EXACT_LIMIT else "tpe"
        notes.append(
            f"auto chose {chosen}: at most {bound:,} valid plans "
            + ("(cheap to evaluate them all)" if chosen == "exact" else f"(over {EXACT_LIMIT:,}; TPE with {trials} trials)")
        )
    if chosen != "exact":
        # More trials than valid plans cannot do better than evaluating every valid plan once: a sampler spends its
        # trials on invalid and repeated proposals too (a random sampler's 84 trials of an 84-plan space saw 14 of
        # them), each step slower than the last (6,000 TPE trials of a 2,000-plan space: minutes).
        valid = valid_plan_count(problem, trials, bound)
        if valid is not None:
            notes.append(f"--trials {trials:,} is more than the {valid:,} valid plans of the space: every valid plan "
                         f"evaluated instead of sampling with {chosen}")
            chosen = "exact"

    def report(done: int, total: int) -> None:
        if progress:
            progress(chosen, done, total)

    recorded = None
    if store is not None and chosen == "exact":
        from .optuna_study import open_study

        opened, _ = open_study(store, study, problem, objectives, new=new, target=trials,
                               settings={"mode": "search", "sampler": "exact"})
        evaluated = exact_search(problem, report)
        recorded = opened
    elif store is not None:
        from .optuna_study import (
            count_trials,
            evaluated_from_study,
            open_study,
            run_study,
        )

        opened, note = open_study(store, study, problem, objectives, new=new,
                                  target=trials, settings={"mode": "search", "sampler": chosen}, url=storage)
        notes.extend(note.splitlines())
        run = run_study(opened, problem, objectives, sampler_name=chosen, seed=seed, target=trials,
                        report=lambda event: report(count_trials(opened, False), trials))
        notes.extend(run.notes)
        evaluated = evaluated_from_study(run.study, problem)
    elif chosen == "exact":
        evaluated = exact_search(problem, report)
    else:
        from .optuna_search import optuna_search

        evaluated = optuna_search(problem, objectives, chosen, trials, seed, report)
    ranked, feasible, rejected = rank(evaluated, problem, objectives, top)
    if recorded is not None:
        from .optuna_study import record_exact

        added = record_exact(recorded, problem, objectives, ranked, {
            "evaluations": evaluated.evaluations, "space_size": evaluated.space_size, "feasible": feasible,
            "rejected": rejected, "recorded": len(ranked), "objectives": [o.name for o in objectives]})
        notes.append(f"kept in study {study!r}: the exact search's counts and its top {len(ranked)} plans as trials "
                     f"({added} new)")
    return SearchResult(
        ranked=ranked,
        sampler=chosen,
        evaluations=evaluated.evaluations,
        space_size=evaluated.space_size,
        elapsed_s=time.perf_counter() - started,
        rejected=rejected,
        objectives=tuple(objectives),
        feasible=feasible,
        pareto=len(objectives) > 1,
        notes=notes,
    )


__all__ = [
    "OBJECTIVES", "Objective", "TrainingProblem", "parse_objectives", "run_search", "SearchResult", "RankedPlan",
    "SAMPLER_CHOICES", "pareto_mask", "valid_plan_count",
]
