"""Serving validation: predict every measured serving run and report the error per source group and kind.

Kinds (``runs.KINDS``): ``max-throughput`` (every request queued; the engine chose the
batch, so the model predicts it: the KV-cache-limited batch, capped by the engine's batch
limit and the number of requests), ``static`` (the batch is given), ``prefill``
(single-request TTFT) and ``rate`` (open-loop request rate: tokens/s, TTFT and ITL).

The serving parameters are looked up per engine release and GPU (``calibrated.py``);
``fit_serving`` refits them with scipy least squares on the log error.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from typing import Callable, Iterable, Mapping, Sequence

import numpy as np

from ..costmodel.serving import ServingParams, estimate_serving, max_batch_fit, static_batch_s
from ..hardware import Cluster, Hardware
from ..serving.plan import ServePlanBatch, ServeWorkload
from .calibrated import ENGINE_MAX_BATCH, params_for
from .runs import ServingRun, SkippedServingRow


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
    tokens = ttft = itl = batch_out = None
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
        cap = ENGINE_MAX_BATCH.get(run.engine, 2048)
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
        cap = ENGINE_MAX_BATCH.get(run.engine, 2048)
        plans = ServePlanBatch.from_columns(gpus, {**{k: getattr(plans, k) for k in ("tp", "pp", "ep", "weights", "kv")},
                                                  "max_batch": np.clip(np.minimum(fit, cap), 1, None)})
        workload = ServeWorkload(run.input_len, run.output_len, request_rate=run.request_rate)
        est = estimate_serving(model, cluster, workload, plans, params)
        values = est.output_tokens_per_s_per_gpu
        finite = np.isfinite(est.ttft_ms)
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
                     overrides: Mapping[tuple[str, str], ServingParams] | None = None) -> ServingReport:
    rows, skipped = [], []
    for item in parsed:
        if isinstance(item, SkippedServingRow):
            skipped.append(item)
            continue
        hw = hardware_loader(item.gpu)
        from .calibrated import SHARES_FIT

        params = (overrides or {}).get((SHARES_FIT.get(item.engine, item.engine), item.gpu)) \
            or params_for(item.engine, item.gpu)
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


# --- fitting ---------------------------------------------------------------------------------

FITTED = ("decode_bandwidth", "kv_bandwidth", "gemm", "step_overhead_us")


def fit_serving(parsed: Sequence[ServingRun | SkippedServingRow], hardware_loader: Callable[[str], Hardware],
                datasets: Mapping[str, str] | None = None) -> dict[tuple[str, str], ServingParams]:
    """Least-squares fit of decode bandwidth, GEMM efficiency and step overhead per (engine, GPU),
    on the log error of throughput (max-throughput and static rows) and single-request TTFT."""
    from scipy.optimize import least_squares

    from ..costmodel.serving import SERVING_PARAM_BOUNDS

    runs = [r for r in parsed if isinstance(r, ServingRun)]
    from .calibrated import SHARES_FIT

    def family(r: ServingRun) -> tuple[str, str]:
        return (SHARES_FIT.get(r.engine, r.engine), r.gpu)

    keys = sorted({family(r) for r in runs})
    out = {}
    for key in keys:
        members = [r for r in runs if family(r) == key and r.kind in ("max-throughput", "static", "prefill")]
        if len(members) < 4:
            continue
        base = params_for(*key)
        hw = hardware_loader(key[1])
        lo = [SERVING_PARAM_BOUNDS[n][0] for n in FITTED]
        hi = [SERVING_PARAM_BOUNDS[n][1] for n in FITTED]
        x0 = [min(max(getattr(base, n), l + 1e-6), h - 1e-6) for n, l, h in zip(FITTED, lo, hi)]
        scale = np.array([1.0, 1.0, 1.0, 1000.0])

        def residuals(x):
            params = base.replace(**dict(zip(FITTED, x * scale)))
            res = []
            for r in members:
                p = predict_run(r, hw, params, requests=_requests((datasets or {}).get(r.id)))
                if r.kind == "prefill":
                    res.append(math.log(p.ttft_ms / r.measured_ttft_ms))
                else:
                    res.append(math.log(p.tokens_per_s_per_gpu / r.measured_tokens_per_s_per_gpu))
            return np.array(res)

        sol = least_squares(residuals, np.array(x0) / scale, bounds=(np.array(lo) / scale, np.array(hi) / scale),
                            loss="soft_l1", f_scale=0.2)
        out[key] = base.replace(**dict(zip(FITTED, sol.x * scale)))
    return out
