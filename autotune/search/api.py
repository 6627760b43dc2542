"""Library entry points: what a command asks for, as one frozen request, and what it gets back.

``search_training``, ``search_serving`` and ``plan_capacity_search`` each take one request and
return a result object; the CLI prints it and ``to_json()`` is what ``--json`` and ``plans.json``
hold.  Nothing here prints or writes files.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

import numpy as np

from ..errors import InputError, comma_items
from ..inputs.calibration import load_calibration
from ..inputs.hardware import Hardware, load_hardware
from ..inputs.modelspec import ModelSpec, load_model
from ..inputs.request import (
    TrainingInputs,
    TrainingRequest,
    cluster_from_options,
    parse_gpus,
    priced_hardware,
)
from ..inputs.workload import ServeWorkload
from ..serving.calibrated import CURRENT, aggregated_only, parameters_note, params_for, release_name, release_note
from ..serving.checkpoint import (
    HOLDS,
    check_checkpoint,
    checkpoint_conflict_note,
    default_checkpoint,
    held_weights,
    published_checkpoint_note,
    unplanned_checkpoint_note,
    with_held_weights,
)
from ..serving.engines import DEFAULTS as ENGINE_DEFAULTS
from ..serving.engines import check_memory_fraction, engine_family, parse_engine
from ..serving.estimate import ServingParams
from ..serving.overlay import load_serving_calibration
from ..serving.plan import ServePlan, parse_serve_fields, serve_plan_from_fields
from ..serving.space import ServeSpace, load_serve_space
from ..training.confidence import with_confidence
from ..training.estimate import add_training_totals
from ..training.plan import ETP_AS_TP, PRECISION, PlanBatch, parse_plan_fields
from ..training.problem import (
    DEFAULT_MEMORY_HEADROOM,
    Objective,
    TrainingProblem,
    parse_objectives,
)
from ..training.space import NVFP4_TRAINING_CC, Space, load_space, trains_in
from . import SAMPLER_CHOICES, run_search
from . import capacity as cap
from .diagnose import Diagnosis, diagnose, no_valid_plan, top_rejection
from .plans_file import SERVE_SPACE, serving_inputs_json, training_inputs_json
from .result import SearchResult
from .serving import ServeSearchResult, capacity_search, gpu_counts, serve_search

Progress = Callable[[str, int, int], None]
# More trials than this is a typo: at a few milliseconds each (more with a storage) it would run for hours.
MAX_TRIALS = 1_000_000
MAX_SEED = 2**31 - 1  # within what numpy and Optuna take (2**32 - 1), and what the command line reads as an int


# --- settings shared by the searches ---------------------------------------------------------------

# The precisions `search` plans in unless --precision or a --space file names others (the bundled
# search_spaces/train.yaml lists these): fp8 is never chosen silently.
DEFAULT_PRECISIONS: tuple[str, ...] = ("bf16",)


def parse_precisions(text: str | None) -> tuple[str, ...] | None:
    """``--precision bf16,fp8`` -> ("bf16", "fp8"); None -> None (the search space's precision axis)."""
    if text is None:
        return None
    items = comma_items(text, what="--precision", field="--precision")
    twice = sorted({n for n in items if items.count(n) > 1})
    if twice:  # as --objective and --hardware refuse a repeat: a typo for another precision, most likely
        raise InputError(f"each precision may appear once, but got {text!r} ({', '.join(twice)} twice)",
                         field="--precision")
    names = tuple(items)
    bad = [n for n in names if n not in PRECISION]
    if not names or bad:
        raise InputError(f"must be a comma-separated list of {', '.join(PRECISION)}, but got {text!r}",
                         field="--precision")
    return names


def parse_fixes(fixes: list[str] | tuple[str, ...]) -> dict[str, Any]:
    """``["tp=8", "pp=2,zero=1"]`` -> ``{"tp": 8, "pp": 2, "zero": 1}``; the same axis twice must agree."""
    out: dict[str, Any] = {}
    for item in fixes:
        if not item.strip():
            raise InputError("is empty; give key=value, e.g. --fix tp=8, or leave --fix out", field="--fix")
        try:
            fields = parse_plan_fields(item)
        except ValueError as exc:
            raise InputError(f"{exc} (use e.g. --fix tp=8)", field="--fix") from None
        if "dp" in fields:
            raise InputError("dp is derived from the GPU count; fix tp, pp and cp instead", field="--fix")
        for key, value in fields.items():
            if key in out and out[key] != value:
                raise InputError(f"{key} is fixed twice, to {out[key]} and to {value}; keep one", field="--fix")
            out[key] = value
    return out


def check_trials(trials: int, flag: str = "--trials") -> int:
    """A trial budget: at least 1 and at most :data:`MAX_TRIALS`."""
    if trials < 1:
        raise InputError(f"must be >= 1, but got {trials}", field=flag)
    if trials > MAX_TRIALS:
        raise InputError(f"must be at most {MAX_TRIALS:,} (more would run for hours; for a space that large use "
                         f"several `autotune worker` processes on one --storage), but got {trials:,}", field=flag)
    return trials


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How to search: the space and its pinned axes (``fixes``, already parsed), the sampler and what to rank by."""

    space: str | None = None
    fixes: Mapping[str, Any] = field(default_factory=dict)
    sampler: str = "auto"
    trials: int = 200
    seed: int = 0
    objective: str = "throughput"
    top: int = 10
    # GEMM precisions searched (--precision); None: the space's precision axis (the bundled space's is bf16)
    precisions: tuple[str, ...] | None = None
    memory_headroom: float = DEFAULT_MEMORY_HEADROOM  # fraction of HBM ranked plans leave free (--memory-headroom)

    def __post_init__(self) -> None:
        check_trials(self.trials)
        if not 0 <= self.seed <= MAX_SEED:
            raise InputError(f"must be between 0 and {MAX_SEED}, but got {self.seed}", field="--seed")
        if self.top < 1:
            raise InputError(f"must be >= 1, but got {self.top}", field="--top")
        if self.sampler not in SAMPLER_CHOICES:
            raise InputError(f"must be one of {', '.join(SAMPLER_CHOICES)}, but got {self.sampler!r}",
                             field="--sampler")
        if not 0.0 <= self.memory_headroom < 1.0:
            raise InputError(f"0 <= headroom < 1 must hold (a fraction of HBM), but got {self.memory_headroom}",
                             field="--memory-headroom")


@dataclass(frozen=True, kw_only=True)
class StudyOptions:
    """A persistent Optuna study the search's trials go to (``--storage``, ``--study``)."""

    storage: str
    study: str | None
    new: bool = False
    heartbeat_s: int | None = 30


def inputs_json(inputs: TrainingInputs, space: str | None, problem: TrainingProblem | None = None) -> dict[str, Any]:
    """The ``inputs`` block of a training ``plans.json``: enough to rebuild the problem from anywhere
    (the spec, profile and space embedded, the framework, precisions and headroom; see
    :mod:`autotune.search.plans_file`)."""
    return training_inputs_json(inputs, space, problem.space if problem is not None else None, problem)


def _annotate(result: SearchResult, inputs: TrainingInputs) -> SearchResult:
    """Totals for the token budget, and each plan's expected error band."""
    hw = inputs.cluster.hardware
    return dataclasses.replace(result, ranked=[
        dataclasses.replace(ranked, estimate=with_confidence(add_training_totals(
            ranked.estimate, inputs.cluster.n_gpus, inputs.workload.tokens, hw.price_usd_per_gpu_hour,
            inputs.workload.tokens_per_step), ranked.plan, hw.name, moe_model=inputs.model.moe is not None,
            calibration=inputs.calibration))
        for ranked in result.ranked
    ])


# --- training search ---------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class TrainingSearch:
    """One training search: the inputs (built at the edge), how to search, and where trials are kept.

    ``express``, when given, keeps the search to the plans it marks True (the plans the chosen
    launch-config formats can express).
    """

    inputs: TrainingInputs
    settings: SearchSettings = field(default_factory=SearchSettings)
    study: StudyOptions | None = None
    express: Callable[[PlanBatch], np.ndarray] | None = None


@dataclass(frozen=True)
class TrainingSearchOutcome:
    request: TrainingSearch
    problem: TrainingProblem
    result: SearchResult
    diagnosis: Diagnosis | None  # why nothing fits, and what would; None when a plan fits

    def to_json(self) -> dict[str, Any]:
        document = self.result.to_json()
        document["inputs"] = inputs_json(self.request.inputs, self.request.settings.space, self.problem)
        if self.diagnosis is not None:
            document["diagnosis"] = {"binding": self.diagnosis.binding, "fixes": list(self.diagnosis.fixes)}
        return document


def check_precisions_run_on(space: Space, hw: Hardware, settings: SearchSettings) -> None:
    """At least one precision searched has tensor cores on the GPU: fp8 alone on an A100 is an input error to
    say at once, not a search whose every plan is rejected (one the GPU lacks among others is dropped)."""
    wanted = tuple(space.axes["precision"])
    if not any(trains_in(hw, p) for p in wanted):
        has = [p for p in PRECISION if trains_in(hw, p)]
        if "precision" in settings.fixes:
            field, fix = "--fix", f"fix precision={has[0]}" if has else "drop --fix precision"
        elif settings.precisions is not None or settings.space is None:
            field, fix = "--precision", f"search {has[0]}" if has else "give a profile with bf16 tensor cores"
        else:
            field, fix = "axes.precision", f"list {has[0]}" if has else "give a profile with bf16 tensor cores"
        lacking = [p for p in wanted if not hw.supports(p)]
        untrainable = [p for p in wanted if hw.supports(p)]  # fp4 cores TransformerEngine does not train on
        why = (f"{hw.name} has no {', '.join(lacking)} tensor cores" if lacking else "")
        if untrainable:
            why += ((" and " if why else f"{hw.name}'s ") + f"{', '.join(untrainable)} tensor cores train nothing: "
                    f"TransformerEngine trains NVFP4 on compute capability {NVFP4_TRAINING_CC[0]:.1f} to below "
                    f"{NVFP4_TRAINING_CC[1]:.1f}, and it is {hw.compute_capability:.1f}")
        raise InputError(f"the GPU must support a precision searched, but {why} (it trains in "
                         f"{', '.join(has) or 'none autotune trains with'}); {fix} instead", field=field,
                         source=settings.space if field == "axes.precision" else None)


def training_space(settings: SearchSettings) -> Space:
    """The space searched: the --space file (or the bundled one), its precisions replaced by --precision and its
    axes narrowed by --fix.  A --space file that lists other precisions than --precision is a conflict the user
    settles, not one flag silently winning."""
    space = load_space(settings.space)
    wanted = settings.precisions
    pinned = settings.fixes.get("precision")
    if wanted is not None and pinned is not None and pinned not in wanted:  # --fix would win silently
        raise InputError(f"--fix precision and --precision must agree, but got (--fix precision={pinned}, --precision="
                         f"{','.join(wanted)}); drop one of them, or add {pinned} to --precision", field="--fix")
    if wanted is None:
        return space.fixed(settings.fixes)
    listed = tuple(space.axes["precision"])
    if settings.space is not None and set(listed) != set(wanted):
        raise InputError(f"--precision and the --space file's axes.precision must agree, but got (--precision="
                         f"{','.join(wanted)}, axes.precision={','.join(listed)}); leave out one of them",
                         field="--precision")
    return space.with_precisions(wanted).fixed(settings.fixes)


def check_cost_priced(objectives: Sequence[Objective], price: float | None) -> None:
    """The cost objective ranks plans by USD per million tokens: at a price of 0 (``--price 0``; a profile's own
    price must be > 0) every plan costs 0, and the ranking would be arbitrary while looking like an answer."""
    if price is not None and price <= 0 and any(o.name == "cost" for o in objectives):
        raise InputError(f"price > 0 must hold to rank by --objective cost (USD per million tokens, 0 for every plan "
                         f"at a price of 0), but got (--price={price:g}); give the price per GPU-hour, e.g. --price "
                         "2.5, or leave --price out for the profile's", field="--price")


def check_expert_fixes(model, settings: SearchSettings) -> None:
    """``--fix etp=N`` pins the experts' tensor parallelism: a dense model has no experts, and its rule etp = tp
    turned the fix into a silent tp=N (a 3% slower winner on Llama-3-70B); refused, as --moe-imbalance is."""
    etp = settings.fixes.get("etp")
    if model.moe is None and etp is not None and etp != ETP_AS_TP:
        raise InputError(f"etp pins the experts' tensor parallelism, and {model.name} is dense (its MLP is split by "
                         f"tp), but got (etp={etp}); fix tp instead, or leave etp out", field="--fix")


def training_problem(inputs: TrainingInputs, settings: SearchSettings) -> TrainingProblem:
    check_expert_fixes(inputs.model, settings)
    space = training_space(settings)
    check_precisions_run_on(space, inputs.cluster.hardware, settings)
    return TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload, space, inputs.framework,
                                 memory_headroom=settings.memory_headroom)


def search_training(request: TrainingSearch, progress: Progress | None = None) -> TrainingSearchOutcome:
    """Search the plans of a training run and rank them; diagnose what binds when none fits."""
    inputs, settings = request.inputs, request.settings
    try:
        objectives = parse_objectives(settings.objective, tokens=inputs.workload.tokens)
    except ValueError as exc:
        raise InputError(str(exc), field="--objective") from None
    check_cost_priced(objectives, inputs.cluster.hardware.price_usd_per_gpu_hour)
    problem = training_problem(inputs, settings)
    if request.express is not None:
        problem = dataclasses.replace(problem, express=request.express)
    study = request.study
    result = run_search(problem, objectives, sampler=settings.sampler, trials=settings.trials, seed=settings.seed,
                        top=settings.top, progress=progress, storage=study.storage if study else None,
                        study=study.study if study else None, new=study.new if study else False,
                        heartbeat_s=study.heartbeat_s if study else None)
    result = _annotate(result, inputs)
    diagnosis = None if result.ranked else diagnose(problem, result.rejected, sampler=result.sampler,
                                                        evaluations=result.evaluations)
    return TrainingSearchOutcome(request, problem, result, diagnosis)


# --- capacity planning -------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class CapacitySearch:
    """Which hardware and how many GPUs: ``request.hardware`` may list several profiles (comma-separated);
    ``gpu_range`` the GPU counts to try (or ``request.gpus``, one count)."""

    request: TrainingRequest
    settings: SearchSettings = field(default_factory=SearchSettings)
    gpu_range: tuple[int, int] | None = None
    deadline: str | None = None
    pue: float | None = None
    grid_intensity: float | None = None


@dataclass(frozen=True)
class CapacityOutcome:
    request: CapacitySearch
    hardware_names: list[str]
    found: cap.CapacityResult
    chosen_inputs: TrainingInputs | None
    chosen_result: SearchResult | None
    chosen_problem: TrainingProblem | None = None
    # the listed profiles --calibration has no values for (estimated with their profiles' own parameters)
    uncalibrated: tuple[str, ...] = ()

    def to_json(self) -> dict[str, Any]:
        if self.chosen_result is not None and self.chosen_inputs is not None:
            document = self.chosen_result.to_json()
            document["inputs"] = inputs_json(self.chosen_inputs, self.request.settings.space, self.chosen_problem)
        else:
            document = {"plans": [], "search": {}, "inputs": {}}
        document["capacity"] = self.found.to_json()
        if self.uncalibrated:
            document["capacity"]["calibration_not_applied_to"] = list(self.uncalibrated)
        return document


def wants_capacity(gpu_range: tuple[int, int] | None, hardware: str, deadline: str | None) -> bool:
    """A GPU range, several hardware profiles or a deadline make a search a capacity plan."""
    return gpu_range is not None or "," in hardware or deadline is not None


def plan_capacity_search(request: CapacitySearch, progress: Progress | None = None) -> CapacityOutcome:
    """Search every (hardware, GPU count) pair; the cheapest plan in time, the fastest, and the one asked for."""
    given, settings = request.request, request.settings
    names = cap.split_hardware(given.hardware)
    # what is wrong with what was given first (an unknown profile, a bad --deadline), then what is missing
    loaded: list[tuple[str, Hardware]] = []
    for name in names:
        hardware = load_hardware(name)
        # an alias beside its profile's name ('b200,b200-sxm-180gb'), or a copy of a bundled profile beside its
        # name, is one GPU: its rows would be searched and listed twice
        twin = next((earlier for earlier, other in loaded if other == hardware), None)
        if twin is not None:
            raise InputError(f"each profile may appear once, but got ({twin!r} and {name!r}, both the profile "
                             f"{hardware.name}); drop one of them", field="--hardware")
        loaded.append((name, hardware))
    deadline_days = cap.parse_duration_days(request.deadline)
    if given.tokens is None:
        raise InputError("capacity planning needs the training budget, e.g. --tokens 1.5e12", field="--tokens")
    if given.nodes is not None:
        raise InputError("give the range of cluster sizes with --gpus LOW..HIGH, not --nodes", field="--nodes")
    if request.gpu_range is None and given.gpus is None:
        raise InputError("give a GPU count or a range, e.g. --gpus 64..2048", field="--gpus")
    pue, grid = cap.check_pue(request.pue), cap.check_grid_intensity(request.grid_intensity)
    objectives = parse_objectives(settings.objective, tokens=given.tokens)
    if len(objectives) > 1:
        raise InputError("capacity planning ranks by one objective (cost, time, throughput or memory); "
                         "drop the comma-separated list", field="--objective")
    check_cost_priced(objectives, given.price)
    if "etp" in settings.fixes:
        check_expert_fixes(load_model(given.model), settings)
    search_space = training_space(settings)
    profiles = [priced_hardware(name, None) for name in names]
    wanted = tuple(search_space.axes["precision"])
    if not any(hw.supports(p) for hw in profiles for p in wanted):  # none can: said at once, as for one GPU
        if len(profiles) == 1:
            check_precisions_run_on(search_space, profiles[0], settings)
        flag = "--fix" if "precision" in settings.fixes else "--precision"
        raise InputError(f"one of the GPUs must have tensor cores for a precision searched, but got (precision="
                         f"{','.join(wanted)}, hardware={','.join(names)}): none of them has {'/'.join(wanted)}; "
                         "search bf16 instead", field=flag if settings.space is None or flag == "--fix" else "axes.precision",
                         source=None if settings.space is None or flag == "--fix" else settings.space)

    def why_none(inputs: TrainingInputs, result: SearchResult) -> str:
        """Why a pair has no plan, when it is not memory: a precision its GPU lacks, or no valid plan at all (the
        top rejection reason, as a search's diagnosis gives it)."""
        hw = inputs.cluster.hardware
        if not any(hw.supports(p) for p in wanted):
            return f"no {'/'.join(wanted)} tensor cores on {hw.name}"
        if result.feasible == 0 and "out of memory" not in result.rejected:
            problem = TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload, search_space,
                                            inputs.framework, memory_headroom=settings.memory_headroom)
            if no_valid_plan(problem) is not None:
                return f"no valid plan: {top_rejection(problem, result.rejected)}"
        return ""
    node_sizes: dict[str, int] = {}

    def node_size(name: str) -> int:
        if name not in node_sizes:
            node_sizes[name] = given.gpus_per_node or priced_hardware(name, None).gpus_per_node
        return node_sizes[name]

    uncalibrated = _uncalibrated_profiles(names, given.calibration)

    def build(name: str, n: int) -> TrainingInputs:
        calibration = None if name in uncalibrated else given.calibration
        return dataclasses.replace(given, hardware=name, gpus=n, calibration=calibration).build()

    def search_one(inputs: TrainingInputs) -> SearchResult:
        problem = TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload, search_space, inputs.framework,
                                        memory_headroom=settings.memory_headroom)
        return run_search(problem, objectives, sampler=settings.sampler, trials=settings.trials, seed=settings.seed,
                          top=settings.top)

    goal = cap.CapacityGoal(tokens=given.tokens, objective=objectives[0].name, deadline_days=deadline_days,
                            pue=pue, grid=grid,
                            pue_source=cap.PUE_SOURCE if request.pue is None else "given with --pue",
                            grid_source=(cap.GRID_INTENSITY_SOURCE if request.grid_intensity is None
                                         else "given with --grid-intensity"))
    found, results = cap.plan_capacity(names, request.gpu_range, given.gpus, goal, node_size=node_size, build=build,
                                       search_one=search_one, progress=progress, why_none=why_none)
    skipped = tuple(n for n in names if n in uncalibrated)
    if found.chosen is None:
        return CapacityOutcome(request, names, found, None, None, uncalibrated=skipped)
    inputs, result = results[(found.chosen.hardware, found.chosen.gpus)]
    hw = inputs.cluster.hardware

    def with_footprint(estimate: dict) -> dict:
        est = add_training_totals(estimate, inputs.cluster.n_gpus, given.tokens, hw.price_usd_per_gpu_hour,
                                  inputs.workload.tokens_per_step)
        return {**est, **cap.footprint(inputs.cluster.n_gpus, est["training_days"], hw.average_power_w,
                                       hw.price_usd_per_gpu_hour, pue, grid)}

    result = dataclasses.replace(
        result, ranked=[dataclasses.replace(r, estimate=with_footprint(r.estimate)) for r in result.ranked])
    problem = TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload, search_space, inputs.framework,
                                    memory_headroom=settings.memory_headroom)
    return CapacityOutcome(request, names, found, inputs, result, problem, uncalibrated=skipped)


def _uncalibrated_profiles(names: list[str], calibration: str | None) -> frozenset[str]:
    """The listed profiles (names or YAML paths) a --calibration overlay has no values for.  Comparing GPUs
    with a fit of one of them is what a capacity plan is for, so those are estimated uncalibrated; an overlay
    for none of them is refused, as for a single profile (it would act nowhere)."""
    if calibration is None:
        return frozenset()
    fitted = load_calibration(calibration).efficiency
    missing = frozenset(n for n in names if priced_hardware(n, None).name not in fitted)
    if len(missing) == len(names):
        raise InputError(f"must calibrate one of the GPUs compared, but got (hardware={','.join(names)}, calibrated="
                         f"{','.join(sorted(fitted))}); calibrate on runs of one of them or drop --calibration",
                         source=calibration, field="--calibration")
    return missing


# --- serving search ----------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class ServingSearch:
    """One serving search, as given: names are loaded and checked by :func:`search_serving`.

    ``engine`` is the serving engine the plans are estimated for (its memory budget rule and fitted
    parameters: vllm, sglang or trtllm); ``checkpoint`` the weights the user has (None: the catalogue's
    record for a Hugging Face id, else bf16); ``calibration`` a serving calibration YAML from
    ``autotune calibrate`` on serving runs.
    """

    model: str
    hardware: str
    workload: ServeWorkload
    gpus: str | int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    space: str | None = None
    fixes: tuple[str, ...] = ()
    top: int = 10
    price: float | None = None
    engine: str = "vllm"
    checkpoint: str | None = None
    calibration: str | None = None
    engine_release: str | None = None  # e.g. trtllm-0.14: that release's fitted parameters (serving_engine)
    memory_fraction: float | None = None  # the engine's memory flag as the user sets it (None: the engine's default)


@dataclass(frozen=True)
class ServingSearchOutcome:
    request: ServingSearch
    model: ModelSpec
    hardware: Hardware
    n_gpus: int | None
    gpus_per_node: int
    result: ServeSearchResult | None
    parameters_note: str
    capacity: Any = None  # search.serving.CapacityResult when --gpus is a range
    space: ServeSpace | None = None  # the space searched (after --fix)
    checkpoint: str = "bf16"
    params: ServingParams | None = None  # the serving parameters the plans were estimated with

    def to_json(self) -> dict[str, Any]:
        document: dict[str, Any] = self.result.to_json() if self.result else {"plans": [], "search": {}}
        w = self.request.workload
        gpn = self.gpus_per_node
        document["inputs"] = {
            "workload": "serve", "model": self.request.model, "model_spec": self.model.name,
            "hardware": self.hardware.name, "gpus": self.n_gpus,
            "gpus_per_node": min(gpn, self.n_gpus or gpn), "input_len": w.input_len, "output_len": w.output_len,
            "ttft_ms": w.ttft_ms, "tpot_ms": w.tpot_ms, "concurrency": w.concurrency, "request_rate": w.request_rate,
            "mode": w.mode, "space": self.request.space or SERVE_SPACE, "parameters": self.parameters_note,
            **serving_inputs_json(self.model, self.hardware, self.space, engine=self.request.engine,
                                  checkpoint=self.checkpoint, params=self.params,
                                  memory_fraction=self.request.memory_fraction, release=self.request.engine_release),
        }
        if self.capacity is not None:
            # per count: the plans that meet the targets AND run from the checkpoint (what the capacity counts), not
            # search.meeting_targets, which counts every plan that meets them
            document["capacity"] = {"gpus": self.capacity.n_gpus,
                                    "tried": [{"gpus": g, "meeting_runnable": m} for g, m in self.capacity.tried]}
        return document


def serving_engine(engine: str) -> tuple[str, str | None]:
    """``--engine`` as given: (engine family, release key or None), e.g. ``trtllm@0.14`` -> (trtllm, trtllm-0.14)."""
    try:
        return parse_engine(engine)
    except ValueError as exc:
        raise InputError(str(exc), field="--engine") from None


def serving_parameters(engine: str, calibration: str | None,
                       release: str | None = None) -> tuple[ServingParams, str]:
    """The serving parameters of ``engine`` (``NAME`` or ``NAME@MAJOR.MINOR``): the shipped calibration of that
    release (TensorRT-LLM 0.x: its own, fitted on its performance tables; any other release: its family's), or
    a --calibration overlay's."""
    family, stated = serving_engine(engine)
    release = stated or release
    if calibration is None:
        if release is None:
            return CURRENT[family], parameters_note(engine=family)
        return params_for(release), release_note(release)
    table = load_serving_calibration(calibration)
    # as validate reads an overlay: the release's own set, else (a 1.x or vLLM/SGLang release) its family's; a
    # TensorRT-LLM 0.x release never takes the 1.x set
    key = release if release in table else (None if aggregated_only(release) else family)
    if key not in table:
        wanted = (release_name(release) if aggregated_only(release) else
                  f"{release_name(release)} or its family {family}" if release else family)
        # releases --engine can name (a -triton key is a front end validate reads, not a release)
        releases = sorted(k for k in table if k.startswith(f"{family}-") and not k.endswith("-triton")
                          and not aggregated_only(k))
        hint = f"give --engine {release_name(releases[0])}, " if releases and release is None else ""
        raise InputError(f"has no parameters for engine {wanted} (it has {', '.join(sorted(table))}); {hint}add them "
                         "or drop --calibration", source=calibration, field="--calibration")
    return table[key], parameters_note(overlay=Path(calibration).name)


def predict_serve_plan(fields: Mapping[str, Any], n_gpus: int, engine: str, memory_gib: float, *,
                       checkpoint: str, gpu: str = "") -> tuple[ServePlan, bool]:
    """The plan ``predict`` estimates from ``--plan`` fields, and whether its max_batch is the engine's own: left
    out, max_batch is the engine's default limit per attention-DP rank (vLLM max_num_seqs, SGLang's, TensorRT-LLM's
    max_batch_size), under which the engine admits what its KV cache holds, as a deployment launched without the
    flag does (and as `validate` predicts a measured row, which records none).  Left out, weights are what the
    checkpoint holds (``--checkpoint``, or the one a Hugging Face id ships: DeepSeek-R1 fp8), as the engine
    loads them without a quantization flag."""
    fields = with_held_weights(fields, checkpoint)
    try:
        plan = serve_plan_from_fields(fields, n_gpus)
    except ValueError as exc:
        raise InputError(f"{exc}", field="--plan") from None
    if "max_batch" in fields:
        return plan, False
    dp = plan.decode.dp if plan.disaggregated else plan.dp
    limit = int(ENGINE_DEFAULTS[check_serving_engine(engine)].max_batch(memory_gib, gpu)) * dp
    return dataclasses.replace(plan, max_batch=limit), True


def serving_memory_fraction(value: float | None, flag: str = "--memory-fraction") -> float | None:
    """The value of the engine's memory flag a user sets (vLLM --gpu-memory-utilization, SGLang
    --mem-fraction-static, TensorRT-LLM free_gpu_memory_fraction; ``engines.check_memory_fraction``); None keeps
    the engine's own."""
    if value is None:
        return None
    try:
        return check_memory_fraction(value)
    except ValueError as exc:
        raise InputError(f"{exc}; leave {flag} out for the engine's default", field=flag) from None


def check_engine_runs_on(engine: str, hw: Hardware) -> None:
    """TensorRT-LLM is built on CUDA: it has no AMD (ROCm) build, so a plan of it on an AMD GPU is refused."""
    if engine_family(engine) == "trtllm" and hw.vendor != "nvidia":
        raise InputError(f"TensorRT-LLM runs on NVIDIA GPUs only, but {hw.name} is an {hw.vendor.upper()} GPU (its "
                         "profile's vendor); use --engine vllm or --engine sglang", field="--engine")


def check_serving_engine(engine: str) -> str:
    """The engine family of ``--engine`` (its memory rule, defaults and launch files)."""
    return serving_engine(engine)[0]


def serving_checkpoint(model: str, checkpoint: str | None, spec: ModelSpec | None = None) -> str:
    """The checkpoint a serving command plans for (``--checkpoint``, else the catalogue's or bf16); with ``spec``,
    one an engine can load for that model."""
    if checkpoint is None:
        return default_checkpoint(model)
    try:
        found = check_checkpoint(checkpoint)
    except ValueError as exc:
        raise InputError(str(exc), field="--checkpoint") from None
    if spec is not None and not spec.is_moe and held_weights(found) == "mxfp4":
        raise InputError(f"an MXFP4 checkpoint holds MXFP4 MoE experts (gpt-oss) and the engines' MXFP4 quantizes "
                         f"nothing else, but {spec.name} is dense; name the checkpoint you have (bf16, fp8, nvfp4, awq, "
                         f"gptq, compressed-tensors:SCHEME, modelopt:SCHEME)", field="--checkpoint")
    return found


def serving_checkpoint_note(model: str, checkpoint: str | None) -> str | None:
    """Why a config's stated quantization was not taken, or a --checkpoint that names other weights than the model's
    (None when nothing was left out and nothing disagrees)."""
    if checkpoint is not None:
        return checkpoint_conflict_note(model, checkpoint)
    return unplanned_checkpoint_note(model) or published_checkpoint_note(model)


def search_serving(request: ServingSearch) -> ServingSearchOutcome:
    """Rank serving plans (targets met first); with a GPU range and a request rate, the fewest GPUs."""
    spec = load_model(request.model)
    hw = priced_hardware(request.hardware, request.price)
    engine, stated = serving_engine(request.engine)  # "trtllm@0.14" from the API as from the command line
    check_engine_runs_on(engine, hw)
    release = stated or request.engine_release
    request = dataclasses.replace(request, engine=engine, engine_release=release)
    params, note = serving_parameters(engine, request.calibration, release)
    checkpoint = serving_checkpoint(request.model, request.checkpoint, spec)
    fraction = serving_memory_fraction(request.memory_fraction)
    request = dataclasses.replace(request, memory_fraction=fraction)  # as checked: what plans.json records
    fixed: dict[str, Any] = {}
    for item in request.fixes:
        if not item.strip():
            raise InputError("is empty; give key=value, e.g. --fix tp=4, or leave --fix out", field="--fix")
        try:
            fields = parse_serve_fields(item)
        except ValueError as exc:
            raise InputError(f"{exc} (use e.g. --fix tp=4)", field="--fix") from None
        if "replicas" in fields:
            raise InputError("replicas is not an axis: it is --gpus over the GPUs of one replica, so fix those "
                             "(tp, pp, dp, or the prefill_/decode_ pools) or set --gpus", field="--fix")
        for key, value in fields.items():
            if key in fixed and fixed[key] != value:
                raise InputError(f"{key} is fixed twice, to {fixed[key]} and to {value}; keep one", field="--fix")
            fixed[key] = value
    pool_keys = [k for k in fixed if k.partition("_")[0] in ("prefill", "decode")]
    if pool_keys and fixed.get("mode") == "agg":
        raise InputError(f"{pool_keys[0]} sets a pool of a disaggregated plan, but mode=agg is fixed too; drop one",
                         field="--fix")
    mode_fixed = "mode" in fixed  # by the user: mode=agg, which needs no agg in the space
    if aggregated_only(release):
        pools = [k for k in fixed if k.partition("_")[0] in ("prefill", "decode")]
        if fixed.get("mode", "agg") != "agg" or pools:
            raise InputError(f"{release_name(release)} is planned aggregated only (its parameters come from "
                             f"aggregated tables); drop --fix {'mode=disagg' if not pools else pools[0]} or name a 1.x "
                             "release", field="--fix")
        fixed["mode"] = "agg"
    search_space = load_serve_space(request.space)
    if aggregated_only(release) and "agg" not in search_space.axes["mode"] and not mode_fixed:
        # the pin to agg above would replace the space's modes: agg plans ranked for a space that lists none
        raise InputError(f"{release_name(release)} is planned aggregated only (its parameters come from aggregated "
                         f"tables), but the space's modes are ({', '.join(search_space.axes['mode'])}); add agg to "
                         "axes.mode or name a 1.x release", source=search_space.source or None, field="axes.mode")
    try:
        search_space = search_space.fixed(fixed)
    except ValueError as exc:
        raise InputError(str(exc), field="--fix") from None
    if request.space is None:  # the bundled space searches the weights the checkpoint holds, whatever they are
        search_space = search_space.with_weights(HOLDS[check_checkpoint(checkpoint)])
    gpn = request.gpus_per_node or hw.gpus_per_node
    count, bounds = parse_gpus(request.gpus)
    options = dict(top=request.top, engine=engine, checkpoint=checkpoint, memory_fraction=fraction)
    if bounds is not None and bounds[0] != bounds[1]:
        if request.workload.request_rate is None:
            raise InputError("a GPU range finds the fewest GPUs for a request rate: add --request-rate R",
                             field="--gpus")
        if not gpu_counts(bounds[0], bounds[1], gpn):
            raise InputError(f"holds no count a deployment can use on {gpn}-GPU nodes (beyond one node, whole "
                             f"nodes: {gpn}, {2 * gpn}, ...), but got ({bounds[0]}..{bounds[1]})", field="--gpus")
        capacity = capacity_search(spec, hw, gpn, bounds[0], bounds[1], request.workload, search_space, params,
                                   **options)
        return ServingSearchOutcome(request, spec, hw, capacity.n_gpus, gpn, capacity.result, note, capacity,
                                    search_space, checkpoint, params)
    cluster = cluster_from_options(hw, count if bounds is None else bounds[0], request.gpus_per_node, request.nodes)
    result = serve_search(spec, cluster, request.workload, search_space, params, **options)
    return ServingSearchOutcome(request, spec, hw, cluster.n_gpus, cluster.gpus_per_node, result, note,
                                space=search_space, checkpoint=checkpoint, params=params)


__all__ = [
    "DEFAULT_PRECISIONS", "parse_precisions", "CapacityOutcome", "CapacitySearch", "SearchSettings", "ServingSearch",
    "ServingSearchOutcome", "StudyOptions", "TrainingSearch", "TrainingSearchOutcome", "check_trials", "inputs_json",
    "parse_fixes", "plan_capacity_search", "search_serving", "serving_parameters", "serving_checkpoint",
    "serving_checkpoint_note",
    "check_serving_engine", "predict_serve_plan", "release_name", "serving_engine", "serving_memory_fraction", "training_problem", "wants_capacity",
]
