"""What a report shows, gathered from a ``plans.json`` (or a stored Optuna study): pure data, no drawing.

A ``plans.json`` holds the top plans and the search's inputs.  The report rebuilds
the search problem from those inputs and evaluates the space again (exact
enumeration is cheap; large spaces are sampled) for the clouds of plans, runs TPE
and random search at the same budget for the convergence figure, and asks Optuna
for each axis's importance over a sample of fitting plans.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import InputError
from ..plan import PLAN_KEYS
from ..search.problem import OBJECTIVES, TrainingProblem

CLOUD_LIMIT = 60_000  # plans drawn in the throughput/memory clouds, at most
IMPORTANCE_SAMPLE = 1_500  # fitting plans given to Optuna's importance evaluator


@dataclass
class Cloud:
    """Every valid plan of the space (or a sample): arrays, one entry per plan."""

    tokens_per_s_per_gpu: np.ndarray
    memory_gib: np.ndarray
    cost_usd_per_mtok: np.ndarray
    fits: np.ndarray
    total: int  # valid plans in the space (before sampling)


@dataclass
class History:
    """Best objective value so far after each evaluation, per sampler; ``optimum`` from the exact search."""

    objective: str
    direction: str
    unit: str
    curves: dict[str, list[float]]
    optimum: float | None
    budget: int


@dataclass
class ReportData:
    title: str
    inputs: dict[str, Any]
    plans: list[dict[str, Any]]
    search: dict[str, Any]
    capacity_gib: float
    capacity: dict[str, Any] | None = None
    cloud: Cloud | None = None
    history: History | None = None
    importance: dict[str, float] | None = None
    importance_method: str = ""
    notes: list[str] = field(default_factory=list)


def load_plans_json(path: Path) -> dict[str, Any]:
    if not path.exists():
        raise InputError("no such file; give a plans.json written by `autotune search --out DIR`", source=str(path))
    try:
        doc = json.loads(path.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise InputError(f"is not JSON ({exc}); give a plans.json written by `autotune search --out DIR`",
                         source=str(path)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("plans"), list) or "search" not in doc:
        raise InputError("has no 'plans' list and 'search' object; give a plans.json written by "
                         "`autotune search --out DIR`", source=str(path))
    if not doc["plans"]:
        raise InputError("lists no plans (nothing fitted); rerun the search with more GPUs or ZeRO-3", source=str(path))
    return doc


def rebuild_problem(inputs: dict[str, Any], source: str) -> TrainingProblem:
    """The search problem a ``plans.json`` came from, from its ``inputs`` object."""
    from ..inputs import training_inputs
    from ..space import load_space

    missing = [k for k in ("model", "hardware", "gpus", "seq_len", "global_batch") if k not in (inputs or {})]
    if missing:
        raise InputError(f"'inputs' lacks {', '.join(missing)}; rerun `autotune search --out DIR`", source=source)
    space = inputs.get("space")
    if space == "search_spaces/train.yaml":
        space = None  # the bundled default, found from any working directory
    t = training_inputs(inputs["model"], inputs["hardware"], int(inputs["gpus"]), inputs.get("gpus_per_node"), None,
                        int(inputs["seq_len"]), int(inputs["global_batch"]), inputs.get("tokens"),
                        inputs.get("price_usd_per_gpu_hour"))
    return TrainingProblem.build(t.model, t.cluster, t.workload, load_space(space))


def evaluate_cloud(problem: TrainingProblem, seed: int = 0) -> Cloud:
    from ..space import enumerate_valid

    plans = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules).plans
    total = len(plans)
    if total > CLOUD_LIMIT:
        plans = plans.take(np.sort(np.random.default_rng(seed).choice(total, CLOUD_LIMIT, replace=False)))
    est = problem.evaluate(plans)
    return Cloud(est.tokens_per_s_per_gpu, est.memory_gib_per_gpu, est.cost_usd_per_million_tokens, est.fits, total)


def sampler_history(problem: TrainingProblem, objective_name: str, budget: int, seed: int,
                    progress: Callable[[str, int, int], None] | None = None) -> History:
    """Run TPE and random search for ``budget`` evaluations each; the exact optimum when the space is small."""
    from ..search import optuna_report as studies

    objective = OBJECTIVES[objective_name]
    curves = {}
    for sampler in ("tpe", "random"):
        values = studies.run_and_record(problem, objective, sampler, budget, seed,
                                        (lambda d, t, s=sampler: progress(s, d, t)) if progress else None)
        curves[sampler] = best_so_far(values, objective.direction)
    optimum = None
    from ..search import count_valid_upper_bound, run_search
    if count_valid_upper_bound(problem) <= 3_000_000:
        exact = run_search(problem, (objective,), sampler="exact", top=1)
        if exact.ranked:
            optimum = exact.ranked[0].objective_values[objective.name]
    return History(objective.name, objective.direction, objective.unit, curves, optimum, budget)


def best_so_far(values: list[float | None], direction: str) -> list[float]:
    """Running best of the feasible values (None = infeasible); NaN until the first feasible one."""
    out, best = [], None
    for v in values:
        if v is not None and (best is None or (v > best if direction == "maximize" else v < best)):
            best = v
        out.append(float("nan") if best is None else best)
    return out


def importance(problem: TrainingProblem, objective_name: str, seed: int) -> tuple[dict[str, float], str]:
    from ..space import enumerate_valid
    from ..search import optuna_report as studies

    plans = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules).plans
    if len(plans) == 0:
        return {}, ""
    rng = np.random.default_rng(seed)
    if len(plans) > 20 * IMPORTANCE_SAMPLE:
        plans = plans.take(np.sort(rng.choice(len(plans), 20 * IMPORTANCE_SAMPLE, replace=False)))
    est = problem.evaluate(plans)
    fits = np.flatnonzero(est.fits)
    if len(fits) < 10:
        return {}, ""
    pick = np.sort(rng.choice(fits, min(IMPORTANCE_SAMPLE, len(fits)), replace=False))
    values = OBJECTIVES[objective_name].value(est, problem)[pick]
    varying = [k for k in PLAN_KEYS if len(problem.choices[k]) > 1]
    rows = [{k: _plain(getattr(plans, k)[i], k) for k in varying} for i in pick]
    return studies.importances(rows, values, {k: list(problem.choices[k]) for k in varying},
                               OBJECTIVES[objective_name].direction)


def _plain(value: Any, key: str) -> Any:
    from ..plan import CATEGORIES

    if key in CATEGORIES:
        return CATEGORIES[key][int(value)]
    if key == "sp":
        return bool(value)
    return int(value)


def gather(path: Path, *, trials: int = 100, seed: int = 0,
           progress: Callable[[str, int, int], None] | None = None) -> ReportData:
    """Everything the figures need, from a plans.json."""
    doc = load_plans_json(path)
    inputs = doc.get("inputs") or {}
    search = doc["search"]
    objective = (search.get("objectives") or ["throughput"])[0]
    if objective not in OBJECTIVES:
        objective = "throughput"
    title = (f"{inputs.get('model', 'model')} on {inputs.get('gpus', '?')} x {inputs.get('hardware', '?')}, "
             f"sequence {inputs.get('seq_len', '?')}, global batch {inputs.get('global_batch', '?')}")
    data = ReportData(title=title, inputs=inputs, plans=doc["plans"], search=search, capacity_gib=float("nan"),
                      capacity=doc.get("capacity"))
    try:
        problem = rebuild_problem(inputs, str(path))
    except InputError as exc:
        data.notes.append(f"The space was not re-evaluated ({exc}); clouds, convergence and importance are left out.")
        est = doc["plans"][0]["estimate"]
        data.capacity_gib = est["memory_gib_per_gpu"] + est.get("memory_headroom_gib", 0.0)
        return data
    data.capacity_gib = problem.cluster.hardware.memory_gib
    if progress:
        progress("evaluating the space", 0, 1)
    data.cloud = evaluate_cloud(problem, seed)
    if objective == "time" and problem.workload.tokens is None:
        objective = "throughput"
    if trials > 0:
        data.history = sampler_history(problem, objective, trials, seed, progress)
    data.importance, data.importance_method = importance(problem, objective, seed)
    return data


__all__ = ["Cloud", "History", "ReportData", "best_so_far", "gather", "load_plans_json", "rebuild_problem"]
