"""Serving validation: predict every measured serving run and report the error per source group and kind.

Kinds (``runs.KINDS``): ``max-throughput`` (every request queued; the engine chose the
batch, so the model predicts it: the KV-cache-limited batch, capped by the engine's batch
limit and the number of requests), ``static`` (the batch is given), ``prefill``
(single-request TTFT) and ``rate`` (open-loop request rate: tokens/s, TTFT and ITL).

The serving parameters are looked up per engine release and GPU (``calibrated.py``);
``fit_serving`` refits them with scipy least squares on the log error.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..inputs.hardware import Cluster, Hardware, hardware_names, load_hardware
from ..inputs.workload import ServeWorkload
from .calibrated import SHARES_FIT, engine_max_batch, params_for
from .estimate import ServingParams, estimate_serving, max_batch_fit, static_batch_s
from .plan import ServePlanBatch
from .runs import ServingRun, SkippedServingRow, read_serving_runs


@dataclass(frozen=True)
class ServingPrediction:
    tokens_per_s_per_gpu: float | None
    ttft_ms: float | None
    itl_ms: float | None
    batch: float | None
    low: float | None = None  # range over the unknown KV dtype
    high: float | None = None


def _batch_of(run: ServingRun) -> ServePlanBatch:
    kvs = list(run.kv)
    return ServePlanBatch.from_columns(run.tp * run.pp, {
        "tp": [run.tp] * len(kvs), "pp": [run.pp] * len(kvs), "ep": [1] * len(kvs),
        "weights": [run.weights] * len(kvs), "kv": kvs, "max_batch": [1] * len(kvs),
    })


def _requests(run_dataset: str | None) -> int | None:
    if not run_dataset:
        return None
    found = re.search(r"(\d+)\s+requests", run_dataset)
    return int(found.group(1)) if found else None


def predict_run(run: ServingRun, hw: Hardware, params: ServingParams, *, requests: int | None = None) -> ServingPrediction:
    """The model's prediction for one run (a point: the mean over unknown KV dtypes, with the range)."""
    plans = _batch_of(run)
    cluster = Cluster(hardware=hw, n_gpus=run.tp * run.pp, gpus_per_node=max(hw.gpus_per_node, run.tp * run.pp))
    model = run.model
    gpus = run.tp * run.pp
    ttft = itl = batch_out = None
    if run.kind == "static":
        t = static_batch_s(model, cluster, plans, params, np.full(len(plans), run.batch), run.input_len, run.output_len)
        values = run.batch * run.output_len / t / gpus
        batch_out = float(run.batch)
    elif run.kind == "prefill":
        t = static_batch_s(model, cluster, plans, params, np.full(len(plans), run.batch or 1), run.input_len, 1)
        ttft = float(np.mean(t) * 1e3)
        return ServingPrediction(None, ttft, None, float(run.batch or 1), float(np.min(t) * 1e3), float(np.max(t) * 1e3))
    elif run.kind == "max-throughput":
        fit = max_batch_fit(model, cluster, plans, params, run.input_len + run.output_len).astype(float)
        cap = engine_max_batch(run.engine)
        if requests:
            cap = min(cap, requests)
        batch = np.clip(np.minimum(fit, cap), 1, None)
        workload = ServeWorkload(run.input_len, run.output_len)
        est = estimate_serving(model, cluster, workload, plans, params, batch_override=batch)
        values = est.output_tokens_per_s_per_gpu
        itl = float(np.mean(est.tpot_ms))
        batch_out = float(np.mean(batch))
    else:  # rate
        plans = ServePlanBatch.from_columns(gpus, {**{k: getattr(plans, k) for k in ("tp", "pp", "ep", "weights", "kv")},
                                                  "max_batch": np.full(len(plans), 1)})
        fit = max_batch_fit(model, cluster, plans, params, run.input_len + run.output_len)
        # Over capacity the queue grows until the engine's batch limit, the KV cache or the
        # benchmark's finite request set stops it: the engine then runs at that batch.
        cap = engine_max_batch(run.engine)
        if requests:
            cap = min(cap, requests)
        plans = ServePlanBatch.from_columns(gpus, {**{k: getattr(plans, k) for k in ("tp", "pp", "ep", "weights", "kv")},
                                                  "max_batch": np.clip(np.minimum(fit, cap), 1, None)})
        workload = ServeWorkload(run.input_len, run.output_len, request_rate=run.request_rate)
        est = estimate_serving(model, cluster, workload, plans, params)
        values = est.output_tokens_per_s_per_gpu
        finite = np.isfinite(est.ttft_ms)
        if requests:
            # A finite benchmark: N requests arrive over N / rate seconds and the last one still
            # needs its whole latency, so the measured throughput is N*O over that whole span.
            e2e = np.where(finite, est.ttft_ms, 0.0) / 1e3 + (run.output_len - 1) * est.tpot_ms / 1e3
            span = np.maximum(requests / run.request_rate, requests * run.output_len / est.output_tokens_per_s) + e2e
            values = np.minimum(values, requests * run.output_len / span / gpus)
        ttft = float(np.mean(est.ttft_ms[finite])) if finite.any() else None
        itl = float(np.mean(est.tpot_ms))
        batch_out = float(np.mean(est.batch))
    values = np.asarray(values, dtype=float)
    return ServingPrediction(float(np.mean(values)), ttft, itl, batch_out, float(values.min()), float(values.max()))


def _pct(predicted: float, measured: float) -> float:
    return 100.0 * (predicted - measured) / measured


@dataclass(frozen=True)
class ServingRowResult:
    id: str
    source_group: str
    kind: str
    gpu: str
    measured_tokens_per_s_per_gpu: float | None
    predicted_tokens_per_s_per_gpu: float | None
    error_pct: float | None
    predicted_range: tuple[float, float] | None
    kv_unknown: bool
    predicted_batch: float | None
    measured_ttft_ms: float | None
    predicted_ttft_ms: float | None
    ttft_error_pct: float | None
    measured_itl_ms: float | None
    predicted_itl_ms: float | None
    itl_error_pct: float | None

    def to_json(self) -> dict:
        out = dict(self.__dict__)
        out["predicted_range"] = list(self.predicted_range) if self.predicted_range else None
        return out


@dataclass(frozen=True)
class MapeSummary:
    n: int
    mape_pct: float

    def to_json(self) -> dict:
        return {"n": self.n, "mape_pct": self.mape_pct}


@dataclass
class ServingReport:
    rows: list[ServingRowResult]
    skipped: list[SkippedServingRow]
    throughput: dict[tuple[str, str], MapeSummary] = field(default_factory=dict)  # (group, kind)
    ttft: dict[tuple[str, str], MapeSummary] = field(default_factory=dict)
    itl: dict[tuple[str, str], MapeSummary] = field(default_factory=dict)

    def to_json(self) -> dict:
        def table(d):
            return [{"source_group": g, "kind": k, **s.to_json()} for (g, k), s in sorted(d.items())]

        return {
            "schema": "serving",
            "rows": [r.to_json() for r in self.rows],
            "skipped": [{"id": s.id, "source_group": s.source_group, "reason": s.reason} for s in self.skipped],
            "throughput_mape": table(self.throughput),
            "ttft_mape": table(self.ttft),
            "itl_mape": table(self.itl),
            "overall_throughput_mape_pct": _mape([r.error_pct for r in self.rows if r.error_pct is not None]),
            "point_prediction": "mean over the KV dtypes a row leaves unstated (range shown)",
        }


def _mape(errors: Sequence[float]) -> float | None:
    return float(np.mean(np.abs(errors))) if len(errors) else None


def _summaries(rows: Iterable[ServingRowResult], attr: str) -> dict[tuple[str, str], MapeSummary]:
    groups: dict[tuple[str, str], list[float]] = {}
    for r in rows:
        value = getattr(r, attr)
        if value is not None and math.isfinite(value):
            groups.setdefault((r.source_group, r.kind), []).append(value)
    return {k: MapeSummary(len(v), float(np.mean(np.abs(v)))) for k, v in groups.items()}


def validate_serving(parsed: Sequence[ServingRun | SkippedServingRow], hardware_loader: Callable[[str], Hardware],
                     datasets: Mapping[str, str] | None = None,
                     overrides: Mapping[tuple[str, str], ServingParams] | None = None,
                     params_of: Callable[[ServingRun], ServingParams] | None = None) -> ServingReport:
    """Predict every run.  Parameters: ``params_of(run)`` when given, else ``overrides`` per
    (engine family, GPU), else the shipped calibration (``calibrated.params_for``)."""
    rows, skipped = [], []
    for item in parsed:
        if isinstance(item, SkippedServingRow):
            skipped.append(item)
            continue
        hw = hardware_loader(item.gpu)
        if params_of is not None:
            params = params_of(item)
        else:
            params = (overrides or {}).get(family(item)) or params_for(item.engine, item.gpu)
        pred = predict_run(item, hw, params, requests=_requests((datasets or {}).get(item.id)))
        err = None
        if pred.tokens_per_s_per_gpu is not None and item.measured_tokens_per_s_per_gpu:
            err = _pct(pred.tokens_per_s_per_gpu, item.measured_tokens_per_s_per_gpu)
        ttft_err = None
        # Under an unlimited request rate TTFT is queueing for the whole request set, not a model output.
        if item.measured_ttft_ms and pred.ttft_ms and item.kind in ("prefill", "rate"):
            ttft_err = _pct(pred.ttft_ms, item.measured_ttft_ms)
        itl_err = _pct(pred.itl_ms, item.measured_itl_ms) if (item.measured_itl_ms and pred.itl_ms) else None
        rng = (pred.low, pred.high) if pred.low is not None and len(item.kv) > 1 else None
        rows.append(ServingRowResult(
            id=item.id, source_group=item.source_group, kind=item.kind, gpu=item.gpu,
            measured_tokens_per_s_per_gpu=item.measured_tokens_per_s_per_gpu,
            predicted_tokens_per_s_per_gpu=pred.tokens_per_s_per_gpu, error_pct=err, predicted_range=rng,
            kv_unknown=len(item.kv) > 1, predicted_batch=pred.batch, measured_ttft_ms=item.measured_ttft_ms,
            predicted_ttft_ms=pred.ttft_ms, ttft_error_pct=ttft_err, measured_itl_ms=item.measured_itl_ms,
            predicted_itl_ms=pred.itl_ms, itl_error_pct=itl_err,
        ))
    report = ServingReport(rows=rows, skipped=skipped)
    report.throughput = _summaries(rows, "error_pct")
    report.ttft = _summaries(rows, "ttft_error_pct")
    report.itl = _summaries(rows, "itl_error_pct")
    return report


def validate_serving_csv(path: Path) -> ServingReport:
    """Read a serving-runs CSV and predict every row with the bundled profiles and parameters."""
    profiles = {n: load_hardware(n) for n in hardware_names()}
    parsed = read_serving_runs(path, set(profiles), {n for n, h in profiles.items() if h.supports("fp8")})
    with open(path, newline="", encoding="utf-8-sig") as handle:
        datasets = {row["id"]: row.get("dataset", "") for row in csv.DictReader(handle)}
    return validate_serving(parsed, profiles.__getitem__, datasets)


# --- fitting ---------------------------------------------------------------------------------

FITTED = ("decode_bandwidth", "kv_bandwidth", "gemm", "step_overhead_us", "seq_overhead_us")
_SCALE = np.array([1.0, 1.0, 1.0, 1000.0, 10.0])


def family(r: ServingRun) -> tuple[str, str]:
    """The (engine release, GPU) a run's parameters are fitted for (a Triton front end shares its engine's fit)."""
    return (SHARES_FIT.get(r.engine, r.engine), r.gpu)


def _residuals(run: ServingRun, hw: Hardware, params: ServingParams, requests: int | None) -> list[float]:
    """Log errors of one run: throughput (or single-request TTFT), and ITL where it was measured."""
    p = predict_run(run, hw, params, requests=requests)
    out = []
    if run.kind == "prefill":
        out.append(math.log(p.ttft_ms / run.measured_ttft_ms))
    else:  # (a stable rate row's throughput is the offered rate: its residual is small and constant)
        out.append(math.log(p.tokens_per_s_per_gpu / run.measured_tokens_per_s_per_gpu))
    if run.measured_itl_ms and run.kind != "prefill":
        out.append(math.log(p.itl_ms / run.measured_itl_ms))
    return out


def fit_params(members: Sequence[ServingRun], hardware_loader: Callable[[str], Hardware],
               base_of: Callable[[ServingRun], ServingParams], datasets: Mapping[str, str] | None = None,
               x0: Mapping[str, float] | None = None) -> dict[str, float]:
    """Least-squares fit (soft-L1 on log errors) of the ``FITTED`` parameters shared by ``members``."""
    from scipy.optimize import least_squares

    from .estimate import SERVING_PARAM_BOUNDS

    lo = np.array([SERVING_PARAM_BOUNDS[n][0] for n in FITTED]) / _SCALE
    hi = np.array([SERVING_PARAM_BOUNDS[n][1] for n in FITTED]) / _SCALE
    start = {**{n: getattr(ServingParams(), n) for n in FITTED}, **(x0 or {})}
    x = np.clip(np.array([start[n] for n in FITTED]) / _SCALE, lo + 1e-6, hi - 1e-6)
    bases = [base_of(r) for r in members]
    hws = [hardware_loader(r.gpu) for r in members]
    reqs = [_requests((datasets or {}).get(r.id)) for r in members]

    def residuals(v):
        values = dict(zip(FITTED, v * _SCALE))
        res: list[float] = []
        for r, b, hw, n in zip(members, bases, hws, reqs):
            res += _residuals(r, hw, b.replace(**values), n)
        return np.array(res)

    sol = least_squares(residuals, x, bounds=(lo, hi), loss="soft_l1", f_scale=0.2)
    return {n: float(round(v, 4)) for n, v in zip(FITTED, sol.x * _SCALE)}


def _base(r: ServingRun) -> ServingParams:
    from .calibrated import ENGINE_DEFAULTS, GENERIC_DEFAULTS, engine_properties

    base = ENGINE_DEFAULTS.get(r.engine) or ENGINE_DEFAULTS.get(SHARES_FIT.get(r.engine, "")) or GENERIC_DEFAULTS
    return base.replace(**engine_properties(r.engine))


def fit_serving(parsed: Sequence[ServingRun | SkippedServingRow], hardware_loader: Callable[[str], Hardware],
                datasets: Mapping[str, str] | None = None, *, min_rows: int = 4) -> dict:
    """Fit per (engine family, GPU), pooled per GPU over every engine, and pooled over everything.

    Returns ``{"fitted": {(engine, gpu): values}, "pooled": {gpu: values}, "pooled_all": values}``,
    the three tables of ``calibrated.py``.
    """
    runs = [r for r in parsed if isinstance(r, ServingRun)]
    pooled_all = fit_params(runs, hardware_loader, _base, datasets)
    pooled = {}
    for gpu in sorted({r.gpu for r in runs}):
        members = [r for r in runs if r.gpu == gpu]
        if len(members) >= min_rows:
            pooled[gpu] = fit_params(members, hardware_loader, _base, datasets, pooled_all)
    fitted = {}
    for key in sorted({family(r) for r in runs}):
        members = [r for r in runs if family(r) == key]
        if len(members) >= min_rows:
            fitted[key] = fit_params(members, hardware_loader, _base, datasets, pooled.get(key[1], pooled_all))
    return {"fitted": fitted, "pooled": pooled, "pooled_all": pooled_all}


def params_from_fit(fit: Mapping, run: ServingRun, *, pooled_only: bool = False) -> ServingParams:
    """``calibrated.params_for`` over a ``fit_serving`` result instead of the shipped tables."""
    values = None if pooled_only else fit["fitted"].get(family(run))
    values = values or fit["pooled"].get(run.gpu) or fit["pooled_all"]
    return _base(run).replace(**values)


def leave_one_group_out(parsed: Sequence[ServingRun | SkippedServingRow], hardware_loader: Callable[[str], Hardware],
                        datasets: Mapping[str, str] | None = None) -> dict[str, ServingReport]:
    """For each source group: refit on every other group, predict the held-out group with the
    pooled fit (its engine release is then unseen, as an outside engine's would be)."""
    runs = [r for r in parsed if isinstance(r, ServingRun)]
    out = {}
    for group in sorted({r.source_group for r in runs}):
        train = [r for r in runs if r.source_group != group]
        test = [r for r in runs if r.source_group == group]
        fit = fit_serving(train, hardware_loader, datasets)
        out[group] = validate_serving(test, hardware_loader, datasets,
                                      params_of=lambda r, fit=fit: params_from_fit(fit, r, pooled_only=True))
    return out
