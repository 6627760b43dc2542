"""Validation: predict published training runs with their exact layout and compare.

``validate_runs(runs, hardware_loader, calibration=None)`` predicts every usable row
of a ``training_runs.csv``-style table (see :mod:`autotune.training.runs`) with exactly the
layout and settings the row states -- there is no search -- and compares the
predicted tokens/s per GPU (and peak memory, where the row measured it) with the
measurement.

Settings a row leaves empty are never filled silently.  Every value they could
take is evaluated (:func:`autotune.training.runs.candidate_plans`); the report gives the
range ``[min, max]`` of the predictions over those candidates and names the
unknown fields.  The *point* prediction is the fastest candidate that fits in
memory: published runs are tuned configurations, so among the settings the source
leaves open, the one its authors ran is most likely the fastest that fits.  If no
candidate fits (the model over-estimates the memory of a run that did fit), it is the
candidate needing the least memory, flagged ``fits: false``.

Every row is predicted by :func:`autotune.training.estimate.estimate_training` with the inputs
``autotune predict`` takes -- model, cluster, workload, framework (its ``framework`` and
``framework_version`` cells) and plan -- and nothing else: ``source``, ``source_group``
and ``notes`` never enter a prediction (``source_group`` groups rows in the report).
Candidates the framework cannot run (space.py's framework rules: an interleaved schedule
whose micro-batches do not divide by pp, a ZeRO stage it does not offer, ...) are dropped.

Rows are grouped by (GPU, model, cluster, workload, framework) and each group's
candidate plans are evaluated in one vectorised call of the cost model, so a whole
table takes well under a second; calibration reuses the same engine.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np

from ..errors import InputError
from ..inputs.calibration import (
    Calibration,
    apply_calibration,
    calibration_from_mapping,
)
from ..inputs.hardware import MEASURED_MEMORY_MARGIN, Hardware
from .estimate import estimate_training
from .plan import PRECISION, Plan, PlanBatch
from .runs import MeasuredRun, SkippedRow, candidate_plans, preferred_candidates
from .space import PERMISSIVE_RULES, REASONS, rejection_reasons

HardwareLoader = Callable[[str], Hardware]

# A measured throughput beyond this is a units slip (tokens per second summed over GPUs, per minute, a counter
# overflow), not a result: its model FLOP/s cannot exceed the GPU's highest dense peak of a training precision
# (bf16, fp16, fp8; not int8 or fp4, which train nothing here) by more than this factor -- room for 2:4 sparsity
# and FLOP-counting conventions (the bundled runs reach at most an eighth of it).  Shared with `autotune tune`.
PLAUSIBLE_PEAK_FACTOR = 5.0
# Where the run's precision is known, against that precision's dense peak: no dense run reaches it, and twice
# it leaves room for 2:4 sparsity; a throughput summed over 8 GPUs at 40% MFU (3.2x) is caught, which 5x the
# highest peak (fp8's, twice bf16's) let through for a bf16 run.
PLAUSIBLE_PRECISION_FACTOR = 2.0


def throughput_ceiling(hardware: Hardware, model, seq_len: int, precision: str | None = None) -> tuple[float, str]:
    """The most tokens/s per GPU a measurement of ``model`` on ``hardware`` can show, and why (one phrase):
    ``precision``'s dense peak times PLAUSIBLE_PRECISION_FACTOR where it is given, else the highest training
    precision's times PLAUSIBLE_PEAK_FACTOR."""
    from ..costmodel.flops import training_flops_per_token

    if precision is not None and precision in hardware.peak_tflops:
        factor, peak_flops, which = PLAUSIBLE_PRECISION_FACTOR, hardware.peak_tflops[precision] * 1e12, f"{precision} "
    else:
        peaks = [v for k, v in hardware.peak_tflops.items() if k in PRECISION] or list(hardware.peak_tflops.values())
        factor, peak_flops, which = PLAUSIBLE_PEAK_FACTOR, max(peaks) * 1e12, ""
    flops = training_flops_per_token(model, seq_len, "none")
    why = (f"{factor:g}x what the {hardware.name}'s {which}peak of {peak_flops / 1e12:,.0f} TFLOP/s gives at "
           f"{flops / 1e9:,.1f} GFLOP per token of {model.name}")
    return factor * peak_flops / flops, why


# ---------------------------------------------------------------------------------------------
# Engine: prepared rows, grouped for vectorised evaluation (shared with autotune.training.calibration)


@dataclass(frozen=True)
class Case:
    """One usable row, ready to evaluate: its candidate plans and where they sit in its group's batch."""

    run: MeasuredRun
    profile: str  # bundled profile name (the key of a calibration overlay)
    plans: tuple[Plan, ...]
    group: int
    start: int
    stop: int
    preferred: tuple[int, ...] = ()  # candidates (indices into plans) the point prediction is taken from; () = all


@dataclass(frozen=True)
class Group:
    """Rows sharing GPU, model, cluster, workload and framework: one call of the cost model."""

    profile: str
    run: MeasuredRun  # a representative row (model, cluster, workload, framework)
    plans: PlanBatch


@dataclass(frozen=True)
class Prepared:
    cases: tuple[Case, ...]
    groups: tuple[Group, ...]
    skipped: tuple[SkippedRow, ...]
    profiles: Mapping[str, Hardware]  # bundled profiles as loaded (before calibration)

    @property
    def runs(self) -> list[MeasuredRun]:
        return [c.run for c in self.cases]


@dataclass(frozen=True)
class Evaluation:
    """Per-case predictions at one set of hardware parameters (arrays over the case's candidates)."""

    tokens_per_s_per_gpu: tuple[np.ndarray, ...]
    memory_gib_per_gpu: tuple[np.ndarray, ...]
    fits: tuple[np.ndarray, ...]
    chosen: np.ndarray  # index of the point prediction within each case's candidates
    rows: tuple[dict, ...] | None = None  # full estimate rows of the chosen candidates (when asked)

    def point(self) -> tuple[np.ndarray, np.ndarray]:
        tput = np.array([t[i] for t, i in zip(self.tokens_per_s_per_gpu, self.chosen)])
        mem = np.array([m[i] for m, i in zip(self.memory_gib_per_gpu, self.chosen)])
        return tput, mem


def _group_key(run: MeasuredRun, profile: str) -> tuple:
    return (profile, run.model, run.n_gpus, run.gpus_per_node, run.workload, run.framework)


def runnable(run: MeasuredRun, hardware: Hardware, plans: list[Plan]) -> tuple[list[Plan], str | None]:
    """The candidates the run's framework can execute, and the first reason if none can."""
    batch = PlanBatch.from_plans(plans)
    reasons = rejection_reasons(run.model, run.cluster(hardware), run.workload, batch, PERMISSIVE_RULES,
                                framework=run.framework)
    kept = [p for p, r in zip(plans, reasons) if r == 0]
    return kept, (None if kept else REASONS[int(reasons[0])])


def prepare(runs: Iterable[MeasuredRun | SkippedRow], hardware_loader: HardwareLoader) -> Prepared:
    """Check each row against its hardware, enumerate its candidate plans and group the rows."""
    skipped: list[SkippedRow] = []
    # profiles by their own name: a row may name its GPU by an alias ("NVIDIA H100 80GB HBM3"), and a calibration
    # keyed by that text would be one no --hardware can use
    profiles: dict[str, Hardware] = {}
    named: dict[str, str] = {}  # the gpu cell -> the profile it names
    failed: dict[str, str] = {}
    pending: list[tuple[MeasuredRun, str, list[Plan]]] = []
    for run in runs:
        if isinstance(run, SkippedRow):
            skipped.append(run)
            continue
        if run.gpu not in named and run.gpu not in failed:
            try:
                loaded = hardware_loader(run.gpu)
            except (InputError, FileNotFoundError) as exc:
                failed[run.gpu] = getattr(exc, "message", None) or str(exc)
            else:
                named[run.gpu] = loaded.name
                profiles.setdefault(loaded.name, loaded)
        if run.gpu in failed:
            skipped.append(SkippedRow(run.id, f"no bundled hardware profile for gpu {run.gpu!r}: {failed[run.gpu]}"))
            continue
        hardware = profiles[named[run.gpu]]
        measured = run.measured_memory_gib_per_gpu
        if measured is not None and measured > hardware.plausible_memory_gib:
            raise InputError(f"row {run.id!r}: measured_memory_gib_per_gpu <= {hardware.plausible_memory_gib:,.1f} "
                             f"must hold (the {hardware.name}'s {hardware.memory_gib:g} GiB and "
                             f"{MEASURED_MEMORY_MARGIN:.0%}: more cannot be resident on one GPU), but got "
                             f"(measured_memory_gib_per_gpu={measured:g}); give the peak of one GPU in GiB",
                             source=run.source or None, field="measured_memory_gib_per_gpu")
        ceiling, why = throughput_ceiling(hardware, run.model, run.workload.seq_len, run.known.get("precision"))
        if run.measured_tokens_per_s_per_gpu > ceiling:
            raise InputError(f"row {run.id!r}: measured_tokens_per_s_per_gpu <= {ceiling:,.0f} must hold ({why}), but "
                             f"got (measured_tokens_per_s_per_gpu={run.measured_tokens_per_s_per_gpu:g}); give tokens "
                             "per second per GPU, not summed over the cluster",
                             source=run.source or None, field="measured_tokens_per_s_per_gpu")
        precision = run.known.get("precision")
        if precision and precision != "fp16" and not hardware.supports(precision):
            skipped.append(SkippedRow(run.id, f"cannot be expressed: {run.gpu} has no {precision} tensor cores"))
            continue
        try:
            run.cluster(hardware)
        except ValueError as exc:
            skipped.append(SkippedRow(run.id, f"cannot be expressed: {exc}"))
            continue
        plans = candidate_plans(run, tuple(hardware.peak_tflops))
        if not plans:
            tp, pp, cp = (run.known.get(k, 1) for k in ("tp", "pp", "cp"))
            skipped.append(SkippedRow(
                run.id, f"cannot be expressed: no valid plan for tp={tp}, pp={pp}, cp={cp} on {run.n_gpus} GPUs"))
            continue
        plans, why = runnable(run, hardware, plans)
        if not plans:
            skipped.append(SkippedRow(run.id, f"cannot be expressed: {run.framework.label} cannot run it ({why})"))
            continue
        pending.append((run, hardware.name, plans))

    by_key: dict[tuple, list[int]] = defaultdict(list)
    for i, (run, profile, _) in enumerate(pending):
        by_key[_group_key(run, profile)].append(i)
    cases: list[Case | None] = [None] * len(pending)
    groups: list[Group] = []
    for members in by_key.values():
        all_plans: list[Plan] = []
        for i in members:
            run, profile, plans = pending[i]
            preferred = preferred_candidates(run, plans)
            cases[i] = Case(run=run, profile=profile, plans=tuple(plans), group=len(groups),
                            start=len(all_plans), stop=len(all_plans) + len(plans),
                            preferred=() if len(preferred) == len(plans) else tuple(preferred))
            all_plans.extend(plans)
        first_run, first_profile, _ = pending[members[0]]
        groups.append(Group(profile=first_profile, run=first_run, plans=PlanBatch.from_plans(all_plans)))
    return Prepared(cases=tuple(c for c in cases if c is not None), groups=tuple(groups),
                    skipped=tuple(skipped), profiles=profiles)


def point_candidate(t: np.ndarray, m: np.ndarray, f: np.ndarray, preferred: Sequence[int] = ()) -> int:
    """The candidate behind a row's point prediction.

    Among ``preferred`` (the candidates consistent with what is known of the row, e.g. a
    framework's default micro-batch count; all if empty): the fastest that fits in memory, or the
    one needing the least memory if none fits.  Its memory is the row's predicted memory, so the
    throughput and the memory of a row always describe the same configuration.
    """
    pool = np.asarray(preferred, dtype=np.int64) if len(preferred) else np.arange(t.size)
    tp, mp, fp = t[pool], m[pool], f[pool]
    return int(pool[np.argmax(np.where(fp, tp, -np.inf))]) if fp.any() else int(pool[np.argmin(mp)])


def evaluate(prepared: Prepared, hardware: Mapping[str, Hardware] | None = None, *, detail: bool = False,
             groups: Sequence[int] | None = None) -> Evaluation:
    """Predict every case with ``hardware`` (profile name -> Hardware; default: the loaded profiles).

    ``groups`` restricts the work to those groups (cases of other groups get empty arrays).
    """
    hardware = hardware or prepared.profiles
    wanted = set(range(len(prepared.groups))) if groups is None else set(groups)
    estimates = {}
    for g in wanted:
        group = prepared.groups[g]
        hw = hardware[group.profile]
        fw = group.run.framework
        estimates[g] = estimate_training(group.run.model, group.run.cluster(hw), group.run.workload, group.plans, fw)
    tputs, mems, fits, chosen, rows = [], [], [], [], []
    empty = np.zeros(0)
    for case in prepared.cases:
        est = estimates.get(case.group)
        if est is None:
            tputs.append(empty), mems.append(empty), fits.append(empty.astype(bool)), chosen.append(0)
            rows.append({})
            continue
        sl = slice(case.start, case.stop)
        t, m, f = est.tokens_per_s_per_gpu[sl], est.memory_gib_per_gpu[sl], est.fits[sl]
        best = point_candidate(t, m, f, case.preferred)
        tputs.append(t), mems.append(m), fits.append(f), chosen.append(best)
        if detail:
            rows.append(est.row(case.start + best))
    return Evaluation(tuple(tputs), tuple(mems), tuple(fits), np.asarray(chosen, dtype=np.int64),
                      tuple(rows) if detail else None)


# ---------------------------------------------------------------------------------------------
# Report


def _pct_error(predicted: float, measured: float) -> float:
    return (predicted / measured - 1.0) * 100.0


@dataclass(frozen=True)
class RowResult:
    """One row's comparison. Errors are (predicted/measured - 1) x 100."""

    id: str
    source_group: str
    gpu: str
    measured_tokens_per_s_per_gpu: float
    predicted_tokens_per_s_per_gpu: float
    error_pct: float
    measured_memory_gib_per_gpu: float | None
    predicted_memory_gib_per_gpu: float
    memory_error_pct: float | None
    predicted_range_tokens_per_s_per_gpu: tuple[float, float]  # over the candidates of unknown fields
    predicted_range_memory_gib_per_gpu: tuple[float, float]
    unknown_fields: tuple[str, ...]
    n_candidates: int
    plan: Mapping[str, Any]  # the candidate behind the point prediction
    fits: bool
    framework: str  # NAME@VERSION the row ran on
    inferred: Mapping[str, str]  # field -> which framework default filled it (dropout, micro-batches)
    time_breakdown_s: Mapping[str, float] = field(default_factory=dict)
    memory_breakdown_gib: Mapping[str, float] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {
            "id": self.id,
            "source_group": self.source_group,
            "gpu": self.gpu,
            "measured_tokens_per_s_per_gpu": self.measured_tokens_per_s_per_gpu,
            "predicted_tokens_per_s_per_gpu": self.predicted_tokens_per_s_per_gpu,
            "error_pct": self.error_pct,
            "measured_memory_gib_per_gpu": self.measured_memory_gib_per_gpu,
            "predicted_memory_gib_per_gpu": self.predicted_memory_gib_per_gpu,
            "memory_error_pct": self.memory_error_pct,
            "predicted_range_tokens_per_s_per_gpu": list(self.predicted_range_tokens_per_s_per_gpu),
            "predicted_range_memory_gib_per_gpu": list(self.predicted_range_memory_gib_per_gpu),
            "unknown_fields": list(self.unknown_fields),
            "n_candidates": self.n_candidates,
            "plan": dict(self.plan),
            "fits": self.fits,
            "framework": self.framework,
            "inferred": dict(self.inferred),
        }


@dataclass(frozen=True)
class GroupSummary:
    n: int
    mape_pct: float


@dataclass(frozen=True)
class ValidationReport:
    rows: tuple[RowResult, ...]
    skipped: tuple[SkippedRow, ...]
    mape_pct: float | None  # None without rows; mean |error_pct| of tokens/s per GPU over all compared rows
    memory_mape_pct: float | None  # over rows with a measured memory (None if there are none)
    by_source_group: Mapping[str, GroupSummary]
    calibration: str | None = None  # where the calibration overlay came from, if one was applied
    point_prediction: str = ("fastest candidate that fits in memory (the one needing the least memory if none "
                             "fits) among the values of the fields a row leaves empty")

    @property
    def fit_fraction(self) -> float | None:
        """Share of the compared runs predicted to fit in memory with their own layout (they all ran)."""
        return sum(r.fits for r in self.rows) / len(self.rows) if self.rows else None

    @property
    def not_fitting(self) -> tuple[str, ...]:
        """Ids of the runs predicted not to fit although they ran."""
        return tuple(r.id for r in self.rows if not r.fits)

    def row(self, run_id: str) -> RowResult:
        for r in self.rows:
            if r.id == run_id:
                return r
        raise KeyError(run_id)

    def to_json(self) -> dict:
        """JSON-ready data: ``rows``, ``skipped``, ``mape_pct``, ``memory_mape_pct``, ``by_source_group``."""
        return {
            "rows": [r.to_json() for r in self.rows],
            "skipped": [{"id": s.id, "reason": s.reason} for s in self.skipped],
            "mape_pct": self.mape_pct,
            "memory_mape_pct": self.memory_mape_pct,
            "fit_fraction": self.fit_fraction,
            "not_fitting": list(self.not_fitting),
            "by_source_group": {g: {"n": s.n, "mape_pct": s.mape_pct} for g, s in self.by_source_group.items()},
            "calibration": self.calibration,
            "point_prediction": self.point_prediction,
        }


def summarise(ids_groups: Sequence[tuple[str, str]], errors_pct: Sequence[float]) -> dict[str, GroupSummary]:
    """Per-source-group count and MAPE, groups in order of first appearance."""
    by: dict[str, list[float]] = {}
    for (_, group), err in zip(ids_groups, errors_pct):
        by.setdefault(group, []).append(abs(err))
    return {g: GroupSummary(n=len(v), mape_pct=float(np.mean(v))) for g, v in by.items()}


def report_from(prepared: Prepared, evaluation: Evaluation, *, calibration: str | None = None) -> ValidationReport:
    rows = []
    for case, t, m, f, best, detail in zip(prepared.cases, evaluation.tokens_per_s_per_gpu,
                                           evaluation.memory_gib_per_gpu, evaluation.fits, evaluation.chosen,
                                           evaluation.rows or [None] * len(prepared.cases)):
        run = case.run
        pred_t, pred_m = float(t[best]), float(m[best])
        meas_m = run.measured_memory_gib_per_gpu
        rows.append(RowResult(
            id=run.id,
            source_group=run.source_group,
            gpu=run.gpu,
            measured_tokens_per_s_per_gpu=run.measured_tokens_per_s_per_gpu,
            predicted_tokens_per_s_per_gpu=pred_t,
            error_pct=_pct_error(pred_t, run.measured_tokens_per_s_per_gpu),
            measured_memory_gib_per_gpu=meas_m,
            predicted_memory_gib_per_gpu=pred_m,
            memory_error_pct=_pct_error(pred_m, meas_m) if meas_m else None,
            predicted_range_tokens_per_s_per_gpu=(float(t.min()), float(t.max())),
            predicted_range_memory_gib_per_gpu=(float(m.min()), float(m.max())),
            unknown_fields=run.unknown,
            n_candidates=len(case.plans),
            plan=case.plans[best].as_dict(),
            fits=bool(f[best]),
            framework=run.framework.label,
            inferred=dict(run.inferred),
            time_breakdown_s=dict(detail["time_breakdown_s"]) if detail else {},
            memory_breakdown_gib=dict(detail["memory_breakdown_gib"]) if detail else {},
        ))
    errors = [r.error_pct for r in rows]
    mem_errors = [abs(r.memory_error_pct) for r in rows if r.memory_error_pct is not None]
    return ValidationReport(
        rows=tuple(rows),
        skipped=prepared.skipped,
        mape_pct=float(np.mean(np.abs(errors))) if rows else None,
        memory_mape_pct=float(np.mean(mem_errors)) if mem_errors else None,
        by_source_group=summarise([(r.id, r.source_group) for r in rows], errors),
        calibration=calibration,
    )


def validate_runs(
    runs: Iterable[MeasuredRun | SkippedRow],
    hardware_loader: HardwareLoader,
    calibration: Calibration | Mapping[str, Any] | None = None,
) -> ValidationReport:
    """Predict each usable row with exactly its layout and compare with the measurement.

    ``runs``: the output of :func:`autotune.training.runs.read_runs` (skipped rows pass through to
    the report with their reasons).  ``hardware_loader``: GPU name -> :class:`Hardware`
    (e.g. :func:`autotune.inputs.hardware.load_hardware`); a name it cannot load skips the row.
    ``calibration``: an overlay from :func:`autotune.training.calibration.load_calibration`, applied
    to every profile it names.
    """
    prepared = prepare(runs, hardware_loader)
    hardware = dict(prepared.profiles)
    source = None
    if calibration is not None:
        if not isinstance(calibration, Calibration):
            calibration = calibration_from_mapping(calibration, source="<in memory>")
        hardware = {name: apply_calibration(hw, calibration) for name, hw in hardware.items()}
        source = calibration.source
    return report_from(prepared, evaluate(prepared, hardware, detail=True), calibration=source)
