"""Calibration: fit a few physical efficiency parameters of the hardware profiles to measured runs.

``fit(runs, hardware_loader, params=...)`` fits the named
:class:`~autotune.inputs.hardware.Efficiency` parameters (within ``EFFICIENCY_BOUNDS``) with
``scipy.optimize.least_squares`` on the relative error of throughput -- a row's residual
is ``log(predicted / measured)`` -- and of peak memory where the row measured it
(weighted by ``memory_weight``).

* Per GPU profile, except that profiles on the same silicon at the same clocks share their
  compute parameters (``SILICON_FAMILIES``: the A100 40GB and 80GB), and parameters named
  in ``shared`` take one value across all profiles.
* Two stages: the memory parameters (``MEMORY_PARAMS``) first, on the memory residuals
  alone, then the others on throughput and memory.  Memory parameters change throughput only
  through which candidate plans fit; solving them first keeps the allocator's overhead from
  being traded against GEMM efficiency.
* Each row is predicted exactly as :mod:`autotune.training.validation` does (its layout; for fields
  it leaves empty, the fastest candidate that fits); a table is one vectorised cost-model
  call per (GPU, model, cluster, workload) group, and the Jacobian re-evaluates only the
  groups a parameter touches, so a fit of the whole ``training_runs.csv`` takes ~10 s.
* Rows are weighted so that every source group carries the same total weight
  (``group_balance``): the many MPT rows must not drown the 3D-parallel ones.  A Cauchy
  loss (``f_scale`` ~ 15 % error) keeps rows the model cannot express -- DeepSpeed ZeRO-3 at
  1536 GPUs -- from dragging every parameter (with soft-L1 they pulled the A100's dp_overlap
  to 0 and its tp_overlap to 1).
* A parameter is fitted for a profile only if its rows are sensitive to it (fp8 efficiency
  is not identifiable from A100 rows, TP overlap not from FSDP-only rows); only fitted
  parameters are reported and written.
* Leave-one-source-group-out (``logo=True``): for each source group, fit on all the others
  and predict the held-out one (a profile left without rows takes its silicon family's fit,
  else keeps its bundled values); report its MAPE and the MAPE over all held-out
  predictions, so that fitting cannot hide overfitting.

The result's :meth:`CalibrationResult.overlay` is the overlay YAML::

    hardware:
      h100-sxm5-80gb:
        efficiency: {gemm: 0.57, attention: 0.21, ...}

which :func:`load_calibration` reads back (checking every profile name, key and bound, and
naming the file and field of any error) and :func:`apply_calibration` lays over a profile.
docs/accuracy.md explains the default parameter set.
"""

from __future__ import annotations

import datetime as _dt
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import numpy as np
import yaml

from ..errors import InputError
from ..inputs.calibration import Calibration, apply_calibration
from ..inputs.hardware import EFFICIENCY_BOUNDS, EFFICIENCY_FIELDS, Hardware
from .runs import MeasuredRun, SkippedRow
from .validation import (
    GroupSummary,
    HardwareLoader,
    Prepared,
    evaluate,
    prepare,
    report_from,
    summarise,
)

# The default subset: what the published runs can identify (docs/accuracy.md explains the choice).
DEFAULT_PARAMS: tuple[str, ...] = ("gemm", "fp8_gemm", "attention", "cudnn_attention")
DEFAULT_SHARED: tuple[str, ...] = ()
# Profiles built on the same silicon at the same clocks share their compute parameters (the
# A100 40GB and 80GB differ only in HBM; NVIDIA A100 datasheet, data/hardware.md).  Memory-system
# parameters (memory, fragmentation, workspace_gib) stay per profile.
SILICON_FAMILIES: Mapping[str, str] = {
    "a100-sxm4-40gb": "a100-sxm4", "a100-sxm4-80gb": "a100-sxm4",
    # GH100: the H100 SXM, its 96 GB 500 W variant (efficiencies are fractions of each part's own
    # peak) and the H200 (same die and clocks, more and faster HBM).
    "h100-sxm5-80gb": "gh100", "h100-sxm5-96gb-500w": "gh100", "h200-sxm-141gb": "gh100",
    "h800-sxm5-80gb": "gh100",  # the GH100 die with NVLink capped (DeepSeek-V3 report, section 3.1)
}
MEMORY_PARAMS: tuple[str, ...] = ()
COMPUTE_PARAMS: tuple[str, ...] = ("gemm", "fp8_gemm", "attention", "cudnn_attention", "gemm_overhead_us", "step_overhead_s")
# The profiles whose own validated runs were fitted, one per silicon family: what training reaches of
# a GPU's measured GEMM ceiling is learnt from them (derived_efficiency).
CALIBRATION_REFERENCES: tuple[str, ...] = ("a100-sxm4-80gb", "h100-sxm5-80gb")
DERIVED_PARAMS: tuple[str, ...] = ("gemm", "fp8_gemm", "attention", "cudnn_attention")
_MIN_SENSITIVITY = 1e-3  # |d log(pred) / d param| summed over a profile's rows, per unit of the bounds


# ---------------------------------------------------------------------------------------------
# GPUs without validated runs


def derived_efficiency(reference: Mapping[str, float], calibrated: Sequence[Hardware],
                       has_fp8: bool = True) -> dict[str, float]:
    """Compute efficiencies of a GPU without validated runs, the same way for every such GPU.

    What training reaches of the measured GEMM ceiling (MAMF, ``reference_efficiency``) on the
    calibrated GPUs (:data:`CALIBRATION_REFERENCES`), averaged over them, applied to this GPU's own
    ceiling; its attention kernels keep the calibrated GPUs' mean ratio to the GEMM efficiency.  A GPU
    without a measured ceiling takes the calibrated GPUs' mean ceiling.  Rounded to 3 decimals, as the
    bundled profiles carry them (tests/test_hardware_profiles.py checks they match).
    """
    refs = [h for h in calibrated if "gemm" in h.reference_efficiency]
    if not refs:
        raise ValueError("derived_efficiency needs calibrated profiles with a reference_efficiency.gemm")
    mean = lambda xs: float(np.mean(list(xs)))  # noqa: E731
    ceiling = reference.get("gemm", mean(h.reference_efficiency["gemm"] for h in refs))
    gemm = ceiling * mean(h.efficiency.gemm / h.reference_efficiency["gemm"] for h in refs)
    out = {
        "gemm": gemm,
        "attention": gemm * mean(h.efficiency.attention / h.efficiency.gemm for h in refs),
        "cudnn_attention": gemm * mean(h.efficiency.cudnn_attention / h.efficiency.gemm for h in refs),
    }
    fp8_refs = [h for h in refs if "fp8_gemm" in h.reference_efficiency]
    if has_fp8 and fp8_refs:
        if "fp8_gemm" in reference:
            out["fp8_gemm"] = reference["fp8_gemm"] * mean(h.efficiency.fp8_gemm / h.reference_efficiency["fp8_gemm"]
                                                          for h in fp8_refs)
        else:
            out["fp8_gemm"] = gemm * mean(h.efficiency.fp8_gemm / h.efficiency.gemm for h in fp8_refs)
    return {k: round(v, 3) for k, v in out.items()}


# ---------------------------------------------------------------------------------------------
# Fitting


@dataclass(frozen=True)
class FitSummary:
    mape_pct: float
    memory_mape_pct: float | None
    by_source_group: Mapping[str, GroupSummary]


@dataclass(frozen=True)
class CalibrationResult:
    params: tuple[str, ...]
    shared: tuple[str, ...]
    fitted: Mapping[str, Mapping[str, float]]  # profile -> parameter -> value
    start: Mapping[str, Mapping[str, float]]  # the profiles' values before the fit
    n_rows: int
    n_rows_by_profile: Mapping[str, int]
    before: FitSummary
    after: FitSummary
    logo: Mapping[str, GroupSummary]  # held-out source group -> its MAPE when fitted without it
    logo_mape_pct: float | None  # over every held-out prediction
    success: bool
    message: str
    # Row id -> its error (%) when its source group was held out of the fit (empty without logo):
    # the residuals a new source would see, which the per-plan error bands are built from.
    held_out: Mapping[str, float] = field(default_factory=dict)

    def calibration(self, about: Mapping[str, Any] | None = None) -> Calibration:
        return Calibration(efficiency={k: dict(v) for k, v in self.fitted.items()}, about=dict(about or self.about()))

    def about(self) -> dict:
        return {
            "fitted_by": "autotune.training.calibration.fit",
            "date": _dt.date.today().isoformat(),
            "rows": self.n_rows,
            "params": list(self.params),
            "shared": list(self.shared),
            "mape_pct_before": round(self.before.mape_pct, 2),
            "mape_pct_after": round(self.after.mape_pct, 2),
            "logo_mape_pct": None if self.logo_mape_pct is None else round(self.logo_mape_pct, 2),
        }

    def overlay(self) -> dict:
        """The overlay YAML's content: ``{"hardware": {profile: {"efficiency": {...}}}, "about": {...}}``."""
        return self.calibration().to_mapping()

    def write(self, path: str | Path) -> None:
        """YAML, or JSON where the path ends in .json (``--calibration`` reads a .json file as JSON)."""
        path = Path(path)
        if path.suffix.lower() == ".json":
            path.write_text(json.dumps(self.overlay(), indent=2) + "\n")
        else:
            path.write_text(yaml.safe_dump(self.overlay(), sort_keys=False))

    def notes(self) -> list[str]:
        """What the fit cannot vouch for, in words: a parameter that ended at a bound of its range (the rows
        pushed it there, which more often means they cannot tell it from another parameter than that the GPU
        runs at that efficiency), fewer rows of a GPU than parameters fitted to it, and rows that disagree with
        each other (a large error after the fit).  A fit on a few rows of one shape can move predictions for
        other shapes -- another sequence length, say -- in either direction."""
        notes = []
        for profile, values in self.fitted.items():
            rows = self.n_rows_by_profile.get(profile, 0)
            if rows < len(values):
                notes.append(f"{profile}: {rows} row(s) for {len(values)} parameters: the fit is not determined; "
                             "add rows of other shapes (sequence length, parallelism, precision)")
            for name, value in values.items():
                lo, hi = EFFICIENCY_BOUNDS[name]
                side = "upper" if hi - value < value - lo else "lower"
                if min(value - lo, hi - value) <= 0.01 * (hi - lo) and not (side == "lower" and lo == 0.0):
                    # (an overhead at its lower bound, zero, is a value the rows can give, not a wall)
                    notes.append(f"{profile}: {name} ended at the {side} bound of its range ({value:.3g}): the rows "
                                 "cannot pin it; predictions for shapes unlike the rows may move either way")
        if self.logo_mape_pct is None:
            # one source group (or one row): leave-one-source-group-out has nothing to hold out
            notes.append(f"no held-out error: {self.n_rows} row(s) from one source group fit their own parameters "
                         "(down to 0% error with as many parameters as rows), and nothing measures how the fit "
                         "predicts another source; add rows from other sources before applying it widely")
        elif self.logo_mape_pct > self.before.mape_pct:
            # held out, the fit does worse than what it started from: it learns these rows, not the hardware
            notes.append(f"held out, the fit predicts worse ({self.logo_mape_pct:.1f}% leave-one-source-group-out) than "
                         f"the parameters it started from ({self.before.mape_pct:.1f}%): it fits these rows rather "
                         "than the hardware; keep the bundled calibration, or add rows from more sources")
        if self.after.mape_pct > 25.0:
            notes.append(f"the rows disagree with each other or with the model ({self.after.mape_pct:.1f}% after the "
                         "fit): check them with `autotune validate` before using this calibration")
        return notes

    def to_json(self) -> dict:
        def summary(s: FitSummary) -> dict:
            return {"mape_pct": s.mape_pct, "memory_mape_pct": s.memory_mape_pct,
                    "by_source_group": {g: {"n": v.n, "mape_pct": v.mape_pct} for g, v in s.by_source_group.items()}}

        return {
            "params": list(self.params),
            "shared": list(self.shared),
            "fitted": {k: dict(v) for k, v in self.fitted.items()},
            "start": {k: dict(v) for k, v in self.start.items()},
            "n_rows": self.n_rows,
            "n_rows_by_profile": dict(self.n_rows_by_profile),
            "before": summary(self.before),
            "after": summary(self.after),
            "logo": {g: {"n": v.n, "mape_pct": v.mape_pct} for g, v in self.logo.items()},
            "logo_mape_pct": self.logo_mape_pct,
            "held_out_error_pct": dict(self.held_out),
            "success": self.success,
            "message": self.message,
            "notes": self.notes(),
        }


class _Problem:
    """The least-squares problem over a subset of the prepared cases."""

    def __init__(self, prepared: Prepared, case_index: Sequence[int], params: Sequence[str], shared: Sequence[str],
                 base: Mapping[str, Hardware], memory_weight: float, group_balance: bool,
                 families: Mapping[str, str] = SILICON_FAMILIES):
        self.prepared = prepared
        self.cases = list(case_index)
        self.base = dict(base)
        cases = [prepared.cases[i] for i in self.cases]
        self.profiles = sorted({c.profile for c in cases})
        self.groups = sorted({c.group for c in cases})
        self.groups_of = {p: sorted({c.group for c in cases if c.profile == p}) for p in self.profiles}
        self.measured_t = np.array([c.run.measured_tokens_per_s_per_gpu for c in cases])
        self.measured_m = np.array([c.run.measured_memory_gib_per_gpu or np.nan for c in cases])
        self.has_m = ~np.isnan(self.measured_m)
        counts: dict[str, int] = {}
        for c in cases:
            counts[c.run.source_group] = counts.get(c.run.source_group, 0) + 1
        if group_balance:
            mean = len(cases) / max(len(counts), 1)
            w = np.array([np.sqrt(mean / counts[c.run.source_group]) for c in cases])
        else:
            w = np.ones(len(cases))
        self.w_t = w
        self.w_m = w[self.has_m] * memory_weight
        self.throughput_weight = 1.0
        self.active: list[tuple[tuple[str, ...], str]] = []  # the unknowns the rows could identify
        # Unknowns: (profiles it applies to, name) -- all profiles for a shared parameter, the
        # profile's silicon family for compute parameters, else the profile alone.
        self.unknowns: list[tuple[tuple[str, ...], str]] = [(tuple(self.profiles), name) for name in shared]
        for name in params:
            if name in shared:
                continue
            seen: set[tuple[str, ...]] = set()
            for p in self.profiles:
                family = families.get(p) if name in COMPUTE_PARAMS else None
                members = tuple(q for q in self.profiles if family and families.get(q) == family) or (p,)
                if members not in seen:
                    seen.add(members)
                    self.unknowns.append((members, name))
        self.lo = np.array([EFFICIENCY_BOUNDS[n][0] for _, n in self.unknowns])
        self.hi = np.array([EFFICIENCY_BOUNDS[n][1] for _, n in self.unknowns])

    # z in [0, 1] per unknown <-> parameter values
    def values(self, z: np.ndarray) -> np.ndarray:
        return self.lo + np.clip(z, 0.0, 1.0) * (self.hi - self.lo)

    def z_of(self, hardware: Mapping[str, Hardware]) -> np.ndarray:
        x = []
        for members, name in self.unknowns:
            x.append(np.mean([getattr(hardware[p].efficiency, name) for p in members]))
        x = np.clip(np.array(x, dtype=float), self.lo, self.hi)
        return (x - self.lo) / (self.hi - self.lo)

    def hardware(self, z: np.ndarray) -> dict[str, Hardware]:
        x = self.values(z)
        changes: dict[str, dict[str, float]] = {p: {} for p in self.profiles}
        for (members, name), value in zip(self.unknowns, x):
            for p in members:
                changes[p][name] = float(value)
        return {p: (self.base[p].with_efficiency(**changes[p]) if p in changes else self.base[p]) for p in self.base}

    def predictions(self, z: np.ndarray, groups: Sequence[int] | None = None) -> tuple[np.ndarray, np.ndarray]:
        ev = evaluate(self.prepared, self.hardware(z), groups=self.groups if groups is None else groups)
        t = np.array([ev.tokens_per_s_per_gpu[i][ev.chosen[i]] if ev.tokens_per_s_per_gpu[i].size else np.nan
                      for i in self.cases])
        m = np.array([ev.memory_gib_per_gpu[i][ev.chosen[i]] if ev.memory_gib_per_gpu[i].size else np.nan
                      for i in self.cases])
        return t, m

    def residuals_from(self, t: np.ndarray, m: np.ndarray) -> np.ndarray:
        rt = self.w_t * np.log(t / self.measured_t)
        rm = self.w_m * np.log(m[self.has_m] / self.measured_m[self.has_m])
        return np.concatenate([rt * self.throughput_weight, rm])

    def residuals(self, z: np.ndarray) -> np.ndarray:
        return self.residuals_from(*self.predictions(z))

    def jacobian(self, z: np.ndarray, step: float = 2e-3) -> np.ndarray:
        """Forward differences, re-evaluating only the groups a parameter touches."""
        t0, m0 = self.predictions(z)
        r0 = self.residuals_from(t0, m0)
        jac = np.zeros((r0.size, z.size))
        for j, (members, _) in enumerate(self.unknowns):
            h = step if z[j] + step <= 1.0 else -step
            zj = z.copy()
            zj[j] += h
            groups = sorted({g for p in members for g in self.groups_of[p]})
            t, m = self.predictions(zj, groups)
            touched = np.isfinite(t)
            t = np.where(touched, t, t0)
            m = np.where(np.isfinite(m), m, m0)
            jac[:, j] = (self.residuals_from(t, m) - r0) / h
        return jac


def _solve(problem: _Problem, z0: np.ndarray, loss: str, f_scale: float, max_nfev: int):
    from scipy.optimize import least_squares

    # Drop unknowns the rows are insensitive to (e.g. fp8 efficiency without fp8 rows).
    jac0 = problem.jacobian(z0)
    active = np.abs(jac0).sum(axis=0) > _MIN_SENSITIVITY
    problem.active = [u for u, a in zip(problem.unknowns, active) if a]
    if not active.any():
        return z0, True, "no parameter is identifiable from these rows"

    def fun(za):
        z = z0.copy()
        z[active] = za
        return problem.residuals(z)

    def jac(za):
        z = z0.copy()
        z[active] = za
        return problem.jacobian(z)[:, active]

    sol = least_squares(fun, z0[active], jac=jac, bounds=(0.0, 1.0), loss=loss, f_scale=f_scale,
                        max_nfev=max_nfev, x_scale=1.0, ftol=1e-4, xtol=1e-4, gtol=1e-6)
    z = z0.copy()
    z[active] = sol.x
    return z, bool(sol.success), str(sol.message)


def _summary(prepared: Prepared, case_index: Sequence[int], t: np.ndarray, m: np.ndarray) -> FitSummary:
    cases = [prepared.cases[i] for i in case_index]
    errors = [(ti / c.run.measured_tokens_per_s_per_gpu - 1) * 100 for c, ti in zip(cases, t)]
    mem = [abs(mi / c.run.measured_memory_gib_per_gpu - 1) * 100 for c, mi in zip(cases, m)
           if c.run.measured_memory_gib_per_gpu]
    return FitSummary(
        mape_pct=float(np.mean(np.abs(errors))) if errors else float("nan"),
        memory_mape_pct=float(np.mean(mem)) if mem else None,
        by_source_group=summarise([(c.run.id, c.run.source_group) for c in cases], errors),
    )


def fit(
    runs: Iterable[MeasuredRun | SkippedRow] | Prepared,
    hardware_loader: HardwareLoader,
    params: Sequence[str] = DEFAULT_PARAMS,
    *,
    shared: Sequence[str] = DEFAULT_SHARED,
    memory_weight: float = 0.5,
    group_balance: bool = True,
    loss: str = "cauchy",
    f_scale: float = 0.15,
    logo: bool = True,
    max_nfev: int = 60,
    families: Mapping[str, str] = SILICON_FAMILIES,
    progress: Callable[[str, int, int], None] | None = None,
) -> CalibrationResult:
    """Fit ``params`` per GPU profile (``shared`` ones across profiles) to the usable rows of ``runs``.

    ``memory_weight`` scales the memory residuals against the throughput ones;
    ``f_scale`` is the soft-L1 knee in log-error units (0.15 ~ 15 %).
    ``progress(stage, done, total)`` is told of each fit: the whole file, then each held-out group.
    """
    params = tuple(params)
    shared = tuple(shared)
    for name in params + shared:
        if name not in EFFICIENCY_BOUNDS:
            raise InputError(f"unknown efficiency parameter {name!r}; parameters: {', '.join(EFFICIENCY_FIELDS)}",
                             field="params")
    params = tuple(dict.fromkeys(params + shared))
    prepared = runs if isinstance(runs, Prepared) else prepare(runs, hardware_loader)
    if not prepared.cases:
        raise InputError("no usable rows to fit", field="runs")
    base = dict(prepared.profiles)
    everything = list(range(len(prepared.cases)))

    def two_stage(case_index, start):
        """Memory parameters on the memory residuals first, then the rest on throughput and memory.

        The memory parameters change throughput only through which candidates fit; fitting them
        first, on memory alone, keeps the allocator's overhead from being traded against GEMM
        efficiency (nearly separable problems, solved in turn).
        """
        hw = dict(start)
        mem_params = tuple(n for n in params if n in MEMORY_PARAMS)
        other = tuple(n for n in params if n not in MEMORY_PARAMS)
        ok, msg, active = True, "", []
        if mem_params and memory_weight > 0:
            mp = _Problem(prepared, case_index, mem_params, tuple(n for n in shared if n in mem_params), hw,
                          memory_weight, group_balance, families)
            if mp.has_m.any():
                mp.throughput_weight = 0.0
                zm, ok, msg = _solve(mp, mp.z_of(hw), loss, f_scale, max_nfev)
                hw = mp.hardware(zm)
                active += mp.active
        if other:
            cp = _Problem(prepared, case_index, other, tuple(n for n in shared if n in other), hw,
                          memory_weight, group_balance, families)
            zc, ok2, msg2 = _solve(cp, cp.z_of(hw), loss, f_scale, max_nfev)
            hw = cp.hardware(zc)
            ok, msg = ok and ok2, msg2
            active += cp.active
        return hw, ok, msg, active

    groups_to_hold = list(dict.fromkeys(c.run.source_group for c in prepared.cases)) if logo else []
    steps = 1 + len(groups_to_hold)
    if progress:
        progress("fitting every row", 0, steps)
    problem = _Problem(prepared, everything, params, shared, base, memory_weight, group_balance, families)
    z0 = problem.z_of(base)
    before = _summary(prepared, everything, *problem.predictions(z0))
    fitted_hw, success, message, active = two_stage(everything, base)
    z = problem.z_of(fitted_hw)
    after = _summary(prepared, everything, *problem.predictions(z))
    # Report (and write to the overlay) only what the rows could identify.
    identified: dict[str, list[str]] = {p: [] for p in problem.profiles}
    for members, name in active:
        for p in members:
            if name not in identified[p]:
                identified[p].append(name)
    fitted = {p: {n: float(getattr(fitted_hw[p].efficiency, n)) for n in params if n in identified[p]}
              for p in problem.profiles if identified[p]}
    start = {p: {n: float(getattr(base[p].efficiency, n)) for n in fitted[p]} for p in fitted}

    logo_summary: dict[str, GroupSummary] = {}
    logo_mape = None
    held_out: dict[str, float] = {}
    if logo:
        held_errors: list[float] = []
        groups = groups_to_hold
        for done, group in enumerate(groups, start=1):
            if progress:
                progress(f"holding out {group}", done, steps)
            train = [i for i, c in enumerate(prepared.cases) if c.run.source_group != group]
            test = [i for i, c in enumerate(prepared.cases) if c.run.source_group == group]
            if not train:
                continue
            # Start from the full fit (it converges in a few steps); profiles without training
            # rows start (and stay) at their bundled values.
            train_profiles = {prepared.cases[i].profile for i in train}
            start_hw = {p: (fitted_hw[p] if p in train_profiles else base[p]) for p in base}
            hw, _, _, _ = two_stage(train, start_hw)
            sub = _Problem(prepared, train, params, shared, base, memory_weight, group_balance, families)
            # A held-out profile absent from the training rows takes its silicon family's fit.
            for p in base:
                if p not in sub.profiles and families.get(p):
                    kin = [q for q in sub.profiles if families.get(q) == families.get(p)]
                    if kin:
                        hw[p] = base[p].with_efficiency(**{n: getattr(hw[kin[0]].efficiency, n)
                                                           for n in params if n in COMPUTE_PARAMS})
            ev = evaluate(prepared, hw, groups=sorted({prepared.cases[i].group for i in test}))
            errs = [(ev.tokens_per_s_per_gpu[i][ev.chosen[i]] / prepared.cases[i].run.measured_tokens_per_s_per_gpu - 1) * 100
                    for i in test]
            logo_summary[group] = GroupSummary(n=len(test), mape_pct=float(np.mean(np.abs(errs))))
            held_errors.extend(errs)
            held_out.update({prepared.cases[i].run.id: float(e) for i, e in zip(test, errs)})
        logo_mape = float(np.mean(np.abs(held_errors))) if held_errors else None

    if progress:
        progress("done", steps, steps)
    return CalibrationResult(
        params=params, shared=shared, fitted=fitted, start=start, n_rows=len(everything),
        n_rows_by_profile={p: sum(1 for c in prepared.cases if c.profile == p) for p in problem.profiles},
        before=before, after=after, logo=logo_summary, logo_mape_pct=logo_mape, success=success, message=message,
        held_out=held_out,
    )


def validation_report_with(result: CalibrationResult, runs, hardware_loader):
    """Convenience: the validation report of ``runs`` with ``result``'s fit applied."""
    prepared = runs if isinstance(runs, Prepared) else prepare(runs, hardware_loader)
    hw = {name: apply_calibration(h, result.calibration()) for name, h in prepared.profiles.items()}
    return report_from(prepared, evaluate(prepared, hw, detail=True), calibration="fit")
