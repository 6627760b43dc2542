"""What a report shows, gathered from a ``plans.json`` or a stored Optuna study: pure data, no drawing.

A ``plans.json`` holds the top plans and the search's inputs.  The report rebuilds
the search problem from those inputs and evaluates the space again (exact
enumeration is cheap; large spaces are sampled) for the clouds of plans, runs TPE
and random search at the same budget for the convergence figure, and asks Optuna
for each axis's importance over a sample of fitting plans.

A stored study (``--storage URL --study NAME``, written by ``autotune search --storage``
or ``autotune tune``) carries its problem as a fingerprint; the report rebuilds the
problem from it, ranks the study's own trials (by the cost model, or by measurement
for a ``tune`` study), draws the study's real history against random search at the
same budget, takes importance from the trials, and for measured trials sets the
measurement against the prediction.  The cloud figures re-evaluate the space as above.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ...errors import InputError
from ...inputs.loading import is_finite_number
from ...training.plan import ETP_AS_TP, PLAN_KEYS
from ...training.problem import OBJECTIVES, TrainingProblem
from ..files import check_plan_keys, ranked_entries, read_plans

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
    caption: str = ""  # empty: the TPE / random re-run's caption
    xlabel: str = "evaluations"


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
    study: str | None = None  # name of the stored study the report reads
    measured: list[dict[str, Any]] | None = None  # a tune study's benchmark runs, in trial order


@dataclass(frozen=True)
class StudySource:
    """A stored Optuna study as the report's input (instead of a plans.json)."""

    storage: str
    study: str


_ESTIMATE_NUMBERS = ("step_time_s", "tokens_per_s_per_gpu", "mfu", "memory_gib_per_gpu", "cost_usd_per_million_tokens")
_ESTIMATE_PARTS = ("time_breakdown_s", "memory_breakdown_gib")
_TOTALS = ("training_days", "gpu_hours", "cost_usd", "energy_mwh", "co2e_t")
# What a search could have written: a step, a throughput and a memory above zero, an MFU of at most the peak, and
# nothing astronomically large (the estimates' own bounds are far below).
_MAX_ESTIMATE = 1e15
_POSITIVE = frozenset({"step_time_s", "tokens_per_s_per_gpu", "memory_gib_per_gpu"})
_ESTIMATE_RANGES = {"mfu": (0.0, 1.0)}


def _check_estimate(estimate: Any, where: str, source: str) -> None:
    """A training estimate as the report reads it: the numbers and breakdowns present and numeric."""
    fix = "; rerun `autotune search --out DIR`"
    if not isinstance(estimate, dict):
        raise InputError(f"{where} has no 'estimate' object{fix}", source=source, field="plans.estimate")
    for key in _ESTIMATE_NUMBERS:
        if not is_finite_number(estimate.get(key)):
            raise InputError(f"{where}: estimate.{key} must be a number, but got {estimate.get(key)!r}{fix}",
                             source=source, field=f"estimate.{key}")
        # the report prints these as they stand: a hand edit to -5 tokens/s or 1e300 GiB had been drawn and quoted
        low, high = _ESTIMATE_RANGES.get(key, (0.0, _MAX_ESTIMATE))
        value = float(estimate[key])
        above_low = value > low if key in _POSITIVE else value >= low
        if not (above_low and value <= high):
            raise InputError(f"{where}: {low:g} {'<' if key in _POSITIVE else '<='} estimate.{key} <= {high:g} must "
                             f"hold, but got ({key}={value:g}){fix}", source=source, field=f"estimate.{key}")
    for key in _ESTIMATE_PARTS:
        parts = estimate.get(key)
        if not isinstance(parts, dict) or not all(isinstance(k, str) and is_finite_number(v) and 0 <= v <= _MAX_ESTIMATE
                                                  for k, v in parts.items()):
            raise InputError(f"{where}: estimate.{key} must map parts to numbers from 0 to {_MAX_ESTIMATE:g}{fix}",
                             source=source, field=f"estimate.{key}")
    for key in _TOTALS:
        if key in estimate and not is_finite_number(estimate[key]):
            raise InputError(f"{where}: estimate.{key} must be a number, but got {estimate[key]!r}{fix}",
                             source=source, field=f"estimate.{key}")


def _check_capacity(capacity: Any, source: str) -> None:
    fix = "; rerun the capacity search with --out DIR"
    if not isinstance(capacity, dict) or not isinstance(capacity.get("candidates", []), list):
        raise InputError(f"'capacity' must be an object with a 'candidates' list{fix}", source=source,
                         field="capacity")
    # the ranges search accepts (capacity.check_pue, check_grid_intensity): the report prints them as they stand
    for key, (low, high) in (("pue", (1.0, 3.0)), ("grid_intensity_g_per_kwh", (0.0, 2000.0))):
        value = capacity.get(key)
        if not is_finite_number(value) or not low <= value <= high:
            raise InputError(f"{low:g} <= capacity.{key} <= {high:g} must hold, but got ({key}={value!r}){fix}",
                             source=source, field=f"capacity.{key}")
    chosen = capacity.get("chosen")
    for i, c in enumerate([*capacity.get("candidates", []), *([chosen] if chosen is not None else [])]):
        if not isinstance(c, dict) or not isinstance(c.get("hardware"), str) or not is_finite_number(c.get("gpus")):
            raise InputError(f"capacity candidate {i + 1} must name its hardware and GPUs{fix}", source=source,
                             field="capacity.candidates")
        if isinstance(c["gpus"], float) or c["gpus"] < 1:  # a hand edit to -8 GPUs had been printed in the table
            raise InputError(f"capacity candidate {i + 1}: gpus must be a whole number >= 1, but got "
                             f"(gpus={c['gpus']!r}){fix}", source=source, field="capacity.candidates.gpus")
        if c.get("plan") and not all(is_finite_number(c.get(k)) for k in _TOTALS):
            raise InputError(f"capacity candidate {i + 1} lacks its totals ({', '.join(_TOTALS)}){fix}",
                             source=source, field="capacity.candidates")
        for key in _TOTALS:  # as the estimates: a cost of -5 or 1e300 days (printed with 300 digits) is an edit
            if key in c and is_finite_number(c[key]) and not 0 <= c[key] <= _MAX_ESTIMATE:
                raise InputError(f"capacity candidate {i + 1}: 0 <= {key} <= {_MAX_ESTIMATE:g} must hold, but got "
                                 f"({key}={c[key]:g}){fix}", source=source, field=f"capacity.candidates.{key}")


def load_plans_json(path: Path) -> dict[str, Any]:
    """A training plans.json, checked for what the report reads (a malformed entry is an error naming it)."""
    doc = read_plans(path)
    source = str(path)
    doc["plans"] = ranked_entries(doc, source)  # by the ranks recorded: "best" is rank 1 wherever it stands
    if not doc["plans"]:
        raise InputError("lists no plans (nothing fitted); rerun the search with more GPUs (its diagnosis says what binds)", source=source)
    for position, entry in enumerate(doc["plans"], start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("plan"), dict) or not is_finite_number(entry.get("rank")):
            raise InputError(f"plan {position} needs a 'rank' and a 'plan' object; rerun `autotune search --out DIR`",
                             source=source, field="plans")
        check_plan_keys(entry["plan"], (doc.get("inputs") or {}).get("workload") == "serve", source, entry["rank"])
        _check_estimate(entry.get("estimate"), f"plan {position}", source)
    if not isinstance(doc.get("search"), dict):
        raise InputError("has no 'search' object; rerun `autotune search --out DIR`", source=source, field="search")
    if doc.get("capacity") is not None:
        _check_capacity(doc["capacity"], source)
    return doc


def rebuild_problem(inputs: dict[str, Any], source: str) -> TrainingProblem:
    """The search problem a ``plans.json`` came from, from its ``inputs`` object (the spec, profile and space it
    embeds; see :mod:`autotune.search.plans_file`)."""
    from ...search.plans_file import training_problem_from_plans

    return training_problem_from_plans(inputs, source)


def evaluate_cloud(problem: TrainingProblem, seed: int = 0) -> Cloud:
    from ...training.space import enumerate_valid

    plans = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                            problem.framework).plans
    total = len(plans)
    if total > CLOUD_LIMIT:
        plans = plans.take(np.sort(np.random.default_rng(seed).choice(total, CLOUD_LIMIT, replace=False)))
    est = problem.evaluate(plans)
    # what fits is what the search ranks: within the memory its --memory-headroom leaves
    return Cloud(est.tokens_per_s_per_gpu, est.memory_gib_per_gpu, est.cost_usd_per_million_tokens, problem.fits(est),
                 total)


def sampler_history(problem: TrainingProblem, objective_name: str, budget: int, seed: int,
                    progress: Callable[[str, int, int], None] | None = None) -> History:
    """Run TPE and random search for ``budget`` evaluations each; the exact optimum when the space is small."""
    from ...search import optuna_report as studies

    objective = OBJECTIVES[objective_name]
    curves = {}
    for sampler in ("tpe", "random"):
        values = studies.run_and_record(problem, objective, sampler, budget, seed,
                                        (lambda d, t, s=sampler: progress(s, d, t)) if progress else None)
        curves[sampler] = best_so_far(values, objective.direction)
    return History(objective.name, objective.direction, objective.unit, curves, exact_optimum(problem, objective),
                   budget)


def exact_optimum(problem: TrainingProblem, objective) -> float | None:
    """The best value of ``objective`` over every valid plan, when the space is small enough to enumerate."""
    from ...search import EXACT_LIMIT, count_valid_upper_bound, run_search

    if count_valid_upper_bound(problem) > EXACT_LIMIT:
        return None
    exact = run_search(problem, (objective,), sampler="exact", top=1)
    return exact.ranked[0].objective_values[objective.name] if exact.ranked else None


def best_so_far(values: list[float | None], direction: str) -> list[float]:
    """Running best of the feasible values (None = infeasible); NaN until the first feasible one."""
    out, best = [], None
    for v in values:
        if v is not None and (best is None or (v > best if direction == "maximize" else v < best)):
            best = v
        out.append(float("nan") if best is None else best)
    return out


def importance(problem: TrainingProblem, objective_name: str, seed: int) -> tuple[dict[str, float], str]:
    from ...search import optuna_report as studies
    from ...training.space import enumerate_valid

    plans = enumerate_valid(problem.model, problem.cluster, problem.workload, problem.choices, problem.rules,
                            problem.framework).plans
    if len(plans) == 0:
        return {}, ""
    rng = np.random.default_rng(seed)
    if len(plans) > 20 * IMPORTANCE_SAMPLE:
        plans = plans.take(np.sort(rng.choice(len(plans), 20 * IMPORTANCE_SAMPLE, replace=False)))
    est = problem.evaluate(plans)
    fits = np.flatnonzero(problem.fits(est))
    if len(fits) < 10:
        return {}, ""
    pick = np.sort(rng.choice(fits, min(IMPORTANCE_SAMPLE, len(fits)), replace=False))
    values = OBJECTIVES[objective_name].value(est, problem)[pick]
    varying = [k for k in PLAN_KEYS if len(problem.choices[k]) > 1]
    rows = [{k: _choice(plans, k, i, problem.choices[k]) for k in varying} for i in pick]
    return studies.importances(rows, values, {k: list(problem.choices[k]) for k in varying},
                               OBJECTIVES[objective_name].direction)


def _choice(plans, key: str, i: int, choices) -> Any:
    """Plan ``i``'s value of ``key`` as the space's choice names it: etp = tp is the choice ``tp``."""
    value = _plain(getattr(plans, key)[i], key)
    if key == "etp" and ETP_AS_TP in choices and value not in choices and value == int(plans.tp[i]):
        return ETP_AS_TP
    return value


def _plain(value: Any, key: str) -> Any:
    from ...training.plan import CATEGORIES

    if key in CATEGORIES:
        return CATEGORIES[key][int(value)]
    if key == "sp":
        return bool(value)
    return int(value)


def gather(source: Path | StudySource, *, trials: int = 100, seed: int = 0,
           progress: Callable[[str, int, int], None] | None = None, framework: str | None = None) -> ReportData:
    """Everything the figures need, from a plans.json or a stored study.

    ``framework`` (``report --framework``) must name the framework the plans were searched for; a
    plans.json written before the framework was recorded takes it from there.
    """
    if isinstance(source, StudySource):
        if framework is not None:
            raise InputError("a stored study holds its own framework; leave --framework out", field="--framework")
        return gather_study(source, trials=trials, seed=seed, progress=progress)
    path = source
    doc = load_plans_json(path)
    inputs = doc.get("inputs") or {}
    if framework is not None:
        from ...inputs.framework import load_framework

        given = load_framework(framework)
        if inputs.get("framework") and load_framework(inputs["framework"]).label != given.label:
            raise InputError(f"{path} was searched for framework {inputs['framework']!r}, but --framework gives "
                             f"{framework!r}; leave --framework out", field="--framework")
        inputs = {**inputs, "framework": inputs.get("framework") or framework}
    search = doc["search"]
    objective = (search.get("objectives") or ["throughput"])[0]
    if objective not in OBJECTIVES:  # a hand edit: ranked silently by throughput, the report would mislabel it
        raise InputError(f"the first objective must be one of {', '.join(OBJECTIVES)}, but got (objectives="
                         f"{search.get('objectives')!r}); restore it or rerun `autotune search --out DIR`",
                         source=str(path), field="search.objectives")
    title = (f"{inputs.get('model', 'model')} on {inputs.get('gpus', '?')} x {inputs.get('hardware', '?')}, "
             f"sequence {inputs.get('seq_len', '?')}, global batch {inputs.get('global_batch', '?')}")
    data = ReportData(title=title, inputs=inputs, plans=doc["plans"], search=search, capacity_gib=float("nan"),
                      capacity=doc.get("capacity"))
    if isinstance(inputs.get("calibration"), str):
        data.notes.append(f"The estimates use {inputs.get('hardware', 'the GPU')}'s efficiencies from the calibration "
                          f"overlay {inputs['calibration']} (autotune calibrate), which the search was given.")
    problem = rebuild_problem(inputs, str(path))  # an error (naming the field) when it cannot be rebuilt
    from ...training.plan import plan_from_fields
    from ...training.space import plan_violation

    for entry in doc["plans"]:
        try:
            plan = plan_from_fields(entry["plan"], problem.cluster.n_gpus)
        except (TypeError, ValueError) as exc:
            raise InputError(f"plan of rank {entry['rank']} is malformed: {exc}; rerun `autotune search --out DIR`",
                             source=str(path), field="plans.plan") from None
        why = plan_violation(problem.model, problem.cluster, problem.workload, plan, problem.framework)
        if why:  # a search ranks no such plan: the file was edited
            raise InputError(f"plan of rank {entry['rank']} cannot run: {why}; fix the "
                             "plan or rerun `autotune search --out DIR`", source=str(path), field="plans.plan")
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


# --- a stored study ------------------------------------------------------------------------

_MEASURED_RUNS = ("ok", "failed", "infeasible")


def study_inputs(problem: TrainingProblem) -> dict[str, Any]:
    """The plans.json ``inputs`` object of a study's problem."""
    hw, w = problem.cluster.hardware, problem.workload
    return {"model": problem.model.name, "hardware": hw.name, "gpus": problem.cluster.n_gpus,
            "gpus_per_node": problem.cluster.gpus_per_node, "seq_len": w.seq_len, "global_batch": w.global_batch,
            "tokens": w.tokens, "price_usd_per_gpu_hour": hw.price_usd_per_gpu_hour, "space": problem.space.name}


def counted_trials(records: list[dict[str, Any]], measured: bool) -> list[dict[str, Any]]:
    """The trials that count toward a study's target, in trial order (as ``count_trials`` counts them)."""
    out = []
    for r in sorted(records, key=lambda r: r["number"]):
        a = r["user_attrs"]
        outcome = a.get("outcome")
        if r["state"] in ("WAITING", "RUNNING") or outcome in ("surplus", "duplicate"):
            continue
        if r["state"] == "FAIL" and outcome is None:
            continue  # killed or interrupted, and retried
        if measured and not (a.get("slot") and outcome in _MEASURED_RUNS):
            continue
        out.append(r)
    return out


def trial_value(record: dict[str, Any], measured: bool, limit_gib: float | None = None) -> float | None:
    """A trial's first objective value, or None where its plan is invalid, does not fit or did not run.  A cost-model
    trial fits within ``limit_gib`` per GPU where it is given (what the study's search let plans use: its memory
    less the headroom), else as its estimate says (the whole GPU)."""
    a, values = record["user_attrs"], record.get("values")
    if not values or record["state"] != "COMPLETE":
        return None
    if measured:
        return float(values[0]) if a.get("outcome") == "ok" else None
    estimate = a.get("estimate") or {}
    if limit_gib is not None and isinstance(estimate.get("memory_gib_per_gpu"), (int, float)):
        fits = estimate["memory_gib_per_gpu"] <= limit_gib
    else:
        fits = bool(estimate.get("fits", False))
    if a.get("outcome") not in ("evaluated", "cached") or not fits:
        return None
    return float(values[0])


def _with_totals(estimate: dict[str, Any], problem: TrainingProblem) -> dict[str, Any]:
    from ...training.estimate import add_training_totals

    return add_training_totals(estimate, problem.cluster.n_gpus, problem.workload.tokens,
                               problem.cluster.hardware.price_usd_per_gpu_hour, problem.workload.tokens_per_step)


def _estimates(problem: TrainingProblem, plans: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cost model's estimate of each plan (the study's problem, so the study's hardware parameters)."""
    from ...training.plan import PlanBatch

    if not plans:
        return []
    batch = PlanBatch.from_columns(problem.cluster.n_gpus,
                                   {k: np.array([p[k] for p in plans], dtype=object) for k in PLAN_KEYS})
    est = problem.evaluate(batch)
    return [_with_totals(est.row(i), problem) for i in range(len(plans))]


def _measured_runs(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    rows = []
    for r in counted_trials(records, measured=True):
        a = r["user_attrs"]
        m = a.get("measured") or {}
        rows.append({"trial": r["number"], "plan": a.get("plan"), "plan_key": a.get("plan_key", ""),
                     "outcome": a["outcome"], "measured_tokens_per_s_per_gpu": m.get("tokens_per_s_per_gpu"),
                     "predicted_tokens_per_s_per_gpu": a.get("predicted_tokens_per_s_per_gpu"),
                     "error_pct": a.get("error_pct"), "measured_peak_gib": m.get("peak_memory_gib"),
                     "predicted_memory_gib": (a.get("estimate") or {}).get("memory_gib_per_gpu"),
                     "reason": a.get("failure_reason")})
    return rows


def _measured_ranking(stored, runs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The measured plans, fastest first (one entry per plan), with the cost model's estimate of each."""
    best: dict[str, dict[str, Any]] = {}
    for run in runs:
        if run["outcome"] != "ok" or not run["plan"] or run["measured_tokens_per_s_per_gpu"] is None:
            continue
        held = best.get(run["plan_key"])
        if held is None or run["measured_tokens_per_s_per_gpu"] > held["measured_tokens_per_s_per_gpu"]:
            best[run["plan_key"]] = run
    order = sorted(best.values(), key=lambda r: (-r["measured_tokens_per_s_per_gpu"], r["trial"]))[:10]
    estimates = _estimates(stored.problem, [r["plan"] for r in order])
    return [{"rank": k, "plan": r["plan"], "estimate": est, "trial": r["trial"],
             "measured_tokens_per_s_per_gpu": r["measured_tokens_per_s_per_gpu"]}
            for k, (r, est) in enumerate(zip(order, estimates), start=1)]


IMPORTANCE_MIN_TRIALS = 8  # distinct plans a study needs before its importance is drawn


def study_importance(stored, objective_name: str, measured: bool) -> tuple[dict[str, float], str]:
    """Importance of each axis over the study's own trials.

    One row per distinct plan the study tried: its objective value when it fits (or ran), the
    worst value when it breaks a rule or does not fit (or ran out of memory), so that the
    importance says what takes a plan to the good end of the study's trials, as the sampler saw
    them.  Failed benchmark runs are left out (a crash says little about the plan).
    """
    from ...search import optuna_report as studies

    problem = stored.problem
    choices = problem.choices
    direction = OBJECTIVES[objective_name].direction
    worst = 0.0 if direction == "maximize" else 1e30
    derive_sp = problem.rules.sp_with_tp and set(choices["sp"]) == {False, True}
    varying = [k for k in PLAN_KEYS if len(choices[k]) > 1 and not (k == "sp" and derive_sp)]
    seen: dict[str, tuple[dict[str, Any], float | None]] = {}
    for r in counted_trials(stored.records, measured):
        a = r["user_attrs"]
        plan, key = a.get("plan"), a.get("plan_key")
        tried = a.get("outcome") in (("ok", "infeasible") if measured else ("evaluated", "cached", "invalid"))
        if not tried or not plan or key in seen or any(plan.get(k) not in choices[k] for k in varying):
            continue
        seen[key] = ({k: plan[k] for k in varying}, trial_value(r, measured, problem.memory_limit_gib))
    if len(seen) < IMPORTANCE_MIN_TRIALS or not varying or sum(v is not None for _, v in seen.values()) < 2:
        return {}, ""
    rows = [row for row, _ in seen.values()]
    values = np.array([worst if v is None else v for _, v in seen.values()])
    what = (f"distinct plans {'measured' if measured else 'tried'} in study {stored.name!r} (a plan that "
            f"{'ran out of memory' if measured else 'breaks a rule or does not fit'} counts as the worst value)")
    return studies.importances(rows, values, {k: list(choices[k]) for k in varying}, direction, what=what)


def gather_study(source: StudySource, *, trials: int = 100, seed: int = 0,
                 progress: Callable[[str, int, int], None] | None = None) -> ReportData:
    """Everything the figures need, from a study that ``autotune search --storage`` or ``autotune tune`` kept."""
    from ...search import optuna_report as studies
    from ...search.result import rank

    if progress:
        progress("reading the study", 0, 1)
    stored = studies.read_study(source.storage, source.study)
    problem, objectives, measured = stored.problem, stored.objectives, stored.measured
    objective = objectives[0]
    inputs = study_inputs(problem)
    counted = counted_trials(stored.records, measured)
    sampler = stored.settings.get("sampler", "tpe")
    ranked, feasible, rejected = rank(stored.evaluated, problem, objectives, 10)
    plans = [{**r.to_json(), "estimate": _with_totals(r.estimate, problem)} for r in ranked]
    notes = [f"Read from study {stored.name!r} in {stored.storage}: {len(stored.records):,} trials, "
             f"{len(counted):,} counted" + (f" (target {stored.target:,})" if stored.target else "") + "."]
    runs = None
    if measured:
        runs = _measured_runs(stored.records)
        by_measure = _measured_ranking(stored, runs)
        if by_measure:
            plans = by_measure
        else:
            notes.append("No benchmark run of this study succeeded; the top plans are the cost model's ranking of "
                         "the plans it tried.")
    if not plans:
        raise InputError(f"study {stored.name!r} has no evaluated plan that fits yet ({len(stored.records)} trials); "
                         "run more trials (the same `autotune search`/`tune` with a larger --trials, or "
                         "`autotune worker`), then report again", field="--study")
    title = (f"{inputs['model']} on {inputs['gpus']} x {inputs['hardware']}, sequence {inputs['seq_len']}, "
             f"global batch {inputs['global_batch']}: study {stored.name}")
    search = {"sampler": sampler, "evaluations": stored.evaluated.evaluations, "space_size": stored.evaluated.space_size,
              "feasible": feasible, "rejected": rejected, "objectives": [o.name for o in objectives],
              "trials": len(counted), "mode": stored.settings.get("mode", "search")}
    data = ReportData(title=title, inputs=inputs, plans=plans, search=search,
                      capacity_gib=problem.cluster.hardware.memory_gib, study=stored.name, measured=runs, notes=notes)
    if progress:
        progress("evaluating the space", 0, 1)
    data.cloud = evaluate_cloud(problem, seed)
    if stored.exact is not None and sampler == "exact":
        # Every plan was evaluated: the study keeps the counts and the top plans, not a sampler's history.
        exact = stored.exact
        for key in ("evaluations", "space_size", "feasible", "rejected"):
            if key in exact:
                search[key] = exact[key]
        data.notes.append(f"Study {stored.name!r} was searched exactly ({exact.get('evaluations', 0):,} plans "
                          f"evaluated); it keeps the top {exact.get('recorded', len(counted))} plans as trials.")
        if trials > 0:
            data.history = sampler_history(problem, objective.name, trials, seed, progress)
        data.importance, data.importance_method = importance(problem, objective.name, seed)
        return data
    values = [trial_value(r, measured, problem.memory_limit_gib) for r in counted]
    if values:
        shown = sampler.upper() if sampler in ("tpe", "gp") else sampler
        if measured and stored.settings.get("prior_top"):
            shown = f"cost-model prior, then {shown}"
        label = f"study {stored.name} ({shown})"
        if measured:
            data.history = History(
                "measured throughput", "maximize", "tokens/s/GPU", {label: best_so_far(values, "maximize")}, None,
                len(values), xlabel="benchmark runs (in trial order)",
                caption=f"Best measured tokens/s per GPU after each benchmark run of study {stored.name!r}, in trial "
                        "order (failed and out-of-memory runs count as runs). No random-search line: it would need "
                        "the same number of real runs.")
        else:
            curves = {label: best_so_far(values, objective.direction)}
            if trials > 0:
                random = studies.run_and_record(problem, objective, "random", len(values), seed,
                                                (lambda d, t: progress("random", d, t)) if progress else None)
                curves["random"] = best_so_far(random, objective.direction)
            data.history = History(
                objective.name, objective.direction, objective.unit, curves, exact_optimum(problem, objective),
                len(values), xlabel="trials (in trial order)",
                caption=f"Best {objective.name} among the trials of study {stored.name!r} so far, in trial order"
                        + (f", and random search at the same budget of {len(values)} evaluations (seed {seed})"
                           if "random" in curves else "")
                        + "; the dashed line is the optimum from evaluating every plan.")
    data.importance, data.importance_method = study_importance(stored, "throughput" if measured else objective.name,
                                                               measured)
    if not data.importance:
        data.notes.append(f"Parameter importance is left out: it needs at least {IMPORTANCE_MIN_TRIALS} distinct "
                          f"plans {'measured' if measured else 'tried'} in the study, two of them "
                          f"{'successful runs' if measured else 'plans that fit'}.")
    return data


__all__ = ["Cloud", "History", "ReportData", "StudySource", "best_so_far", "gather", "gather_study",
           "load_plans_json", "rebuild_problem"]
