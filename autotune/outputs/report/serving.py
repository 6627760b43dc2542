"""The report of a serving search (a ``plans.json`` whose ``inputs.workload`` is ``serve``).

The problem is rebuilt from what the file embeds (model spec, hardware profile, request shape,
space; :mod:`autotune.search.plans_file`), the top plans are estimated again, and the whole space
is evaluated for the clouds.  Every serving estimate field is read with ``.get``: a field the
serving model renames or drops leaves a figure or a column out, it does not crash the report.

Figures: output tokens/s per GPU against tokens/s per user (the throughput-interactivity
trade-off), against memory, the latency of the top plans against the targets, and their memory
by part.
"""

from __future__ import annotations

import html as _html
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ...errors import InputError
from ..files import check_plan_keys, ranked_entries

TOP = 10


@dataclass
class ServingCloud:
    """Every plan of the space, evaluated: one entry per plan (NaN where the estimate lacks the field)."""

    per_gpu: np.ndarray
    per_user: np.ndarray
    memory_gib: np.ndarray
    fits: np.ndarray
    meets: np.ndarray
    total: int
    # the plan runs from the search's --checkpoint (False: it needs another, pre-quantized one, and the search ranks
    # it after every plan that runs)
    runnable: np.ndarray | None = None


@dataclass
class ServingReportData:
    title: str
    inputs: dict[str, Any]
    plans: list[dict[str, Any]]  # rank, plan (dict), text (plan string), layout, estimate (fresh)
    search: dict[str, Any]
    capacity_gib: float
    targets: dict[str, float | None]
    cloud: ServingCloud | None = None
    notes: list[str] = field(default_factory=list)
    targets_set: bool = True  # a TTFT or TPOT target or a request rate to meet (Workload.has_targets)


def _number(estimate: Mapping[str, Any] | None, key: str) -> float:
    value = (estimate or {}).get(key)
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return float("nan")
    return float(value)


def _column(est: Any, name: str, n: int) -> np.ndarray:
    value = getattr(est, name, None)
    if value is None:
        return np.full(n, np.nan)
    return np.asarray(value, dtype=float)


def gather_serving(document: Mapping[str, Any], source: str, *, seed: int = 0,
                   progress: Callable[[str, int, int], None] | None = None) -> ServingReportData:
    """Rebuild a serving search from its plans.json and evaluate what the figures show."""
    from ...search.plans_file import serving_inputs_from_plans
    from ...serving.checkpoint import with_held_weights
    from ...serving.estimate import estimate_serving
    from ...serving.plan import ServePlanBatch, serve_plan_from_fields
    from ...serving.space import enumerate_serve

    inputs = document["inputs"]
    entries = ranked_entries(document, source)  # by the ranks recorded, which the report keeps
    if not entries:
        raise InputError("lists no serving plans (none fitted); rerun the search with more GPUs or a lower weight "
                         "precision", source=source)
    served = serving_inputs_from_plans(inputs, source)
    model, cluster, workload = served.model, served.cluster, served.workload
    hw = cluster.hardware
    params, engine = served.params, served.engine
    note = f"engine {engine}, checkpoint {served.checkpoint}; {inputs.get('parameters') or 'shipped parameters'}"
    if served.memory_fraction is not None:
        note += f"; memory flag {served.memory_fraction:g} (--memory-fraction)"
    chosen = []
    for position, entry in enumerate(entries[:TOP], start=1):
        if not isinstance(entry, dict) or not isinstance(entry.get("plan"), dict):
            raise InputError(f"plan {position} is malformed (no 'plan' object); rerun `autotune search --workload "
                             "serve --out DIR`", source=source, field="plans")
        check_plan_keys(entry["plan"], True, source, entry.get("rank", position))
        try:
            chosen.append(serve_plan_from_fields(with_held_weights(entry["plan"], served.checkpoint), cluster.n_gpus))
        except (TypeError, ValueError) as exc:
            raise InputError(f"plan {position} is malformed: {exc}", source=source, field="plans.plan") from None
        served.check_plan(chosen[-1], source, position)
    if progress:
        progress("estimating the top plans", 0, 1)
    fraction = served.memory_fraction
    est = estimate_serving(model, cluster, workload, ServePlanBatch.from_plans(chosen), params, engine=engine,
                           memory_fraction=fraction)
    from ...serving.checkpoint import requirement

    plans = [{"rank": entry["rank"], "plan": p.as_dict(), "text": p.as_string(), "estimate": est.row(i),
              "layout": f"{p.layout()} {p.weights}/{p.kv} b{p.max_batch}",
              "needs": requirement(p.weights, served.checkpoint, engine, model.is_moe, fp4_cores=hw.supports("fp4"))}
             for i, (p, entry) in enumerate(zip(chosen, entries))]
    search = document.get("search") if isinstance(document.get("search"), dict) else {}
    load = {"max-throughput": "maximum throughput", "concurrency": f"{workload.concurrency} concurrent users",
            "rate": f"{workload.request_rate or 0:g} requests/s"}[workload.mode]
    from ...inputs.catalogue import model_label

    # the Hugging Face id the search was given, not only the bundled spec it is planned as
    title = (f"{model_label(inputs.get('model'), model.name)} serving on {cluster.n_gpus} x {hw.name}: input "
             f"{workload.input_len}, output "
             f"{workload.output_len} tokens, {load}")
    data = ServingReportData(title=title, inputs=dict(inputs), plans=plans, search=search,
                             capacity_gib=hw.memory_gib,
                             targets={"ttft_ms": workload.ttft_ms, "tpot_ms": workload.tpot_ms}, notes=[note],
                             targets_set=workload.has_targets)
    if progress:
        progress("evaluating the space", 0, 1)
    enumeration = enumerate_serve(model, cluster, served.space, engine=engine, checkpoint=served.checkpoint)
    every = enumeration.plans
    if len(every) and enumeration.fit_batch:  # the plans the search evaluated: its batch-the-KV-budget-holds ones too
        from ...search.serving import with_fit_batches

        every = with_fit_batches(model, cluster, every, workload, engine, fraction)
    if len(every):
        cloud = estimate_serving(model, cluster, workload, every, params, engine=engine, memory_fraction=fraction)
        n = len(every)
        from ...serving.checkpoint import requirement
        from ...serving.plan import WEIGHTS

        names = np.asarray([WEIGHTS[int(w)] if not isinstance(w, str) else w for w in every.weights], dtype=object)
        runs_from = {w: requirement(w, served.checkpoint, engine, model.is_moe, fp4_cores=hw.supports("fp4")) is None
                     for w in set(names)}
        data.cloud = ServingCloud(
            per_gpu=_column(cloud, "output_tokens_per_s_per_gpu", n), per_user=_column(cloud, "tokens_per_s_per_user", n),
            memory_gib=_column(cloud, "memory_gib_per_gpu", n),
            fits=np.asarray(getattr(cloud, "fits", np.ones(n, dtype=bool)), dtype=bool),
            meets=np.asarray(getattr(cloud, "meets_targets", np.ones(n, dtype=bool)), dtype=bool), total=n,
            runnable=np.array([runs_from[w] for w in names], dtype=bool))
    return data


# --- figures -------------------------------------------------------------------------------------


def throughput_interactivity(data: ServingReportData):
    from .figures import PALETTE, SIZE, Figure, _plt, _png, pareto_front

    c = data.cloud
    if c is None or not np.isfinite(c.per_user).any():
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=SIZE)
    shown = c.fits & np.isfinite(c.per_user) & np.isfinite(c.per_gpu)
    runnable = c.runnable if c.runnable is not None else np.ones_like(shown)
    ok = shown & runnable  # the front and the colours: plans that run from the checkpoint the search was given
    if (shown & ~runnable).any():
        ax.scatter(c.per_user[shown & ~runnable], c.per_gpu[shown & ~runnable], s=8, facecolors="none",
                   edgecolors="#d9a441", lw=0.6, label="needs another checkpoint", rasterized=True)
    ax.scatter(c.per_user[ok & ~c.meets], c.per_gpu[ok & ~c.meets], s=6, c="#cccccc", label="misses a target",
               rasterized=True)
    ax.scatter(c.per_user[ok & c.meets], c.per_gpu[ok & c.meets], s=6, c="#7fa7c9", label="meets the targets",
               rasterized=True)
    if ok.any():
        x, y = c.per_user[ok], c.per_gpu[ok]
        front = pareto_front(x, y, maximize_x=True, maximize_y=True)
        ax.step(x[front], y[front], where="post", color=PALETTE[3], lw=1.5, label="Pareto front")
    tx = np.array([_number(p["estimate"], "tokens_per_s_per_user") for p in data.plans])
    ty = np.array([_number(p["estimate"], "output_tokens_per_s_per_gpu") for p in data.plans])
    ax.scatter(tx, ty, s=60, facecolors="none", edgecolors="black", lw=1.2, zorder=4, label="top plans")
    for p, x, y in zip(data.plans[:5], tx, ty):
        if np.isfinite(x) and np.isfinite(y):
            ax.annotate(str(p["rank"]), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.set_xlabel("output tokens/s per user (interactivity)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.legend(fontsize=8)
    return Figure("throughput_interactivity", "Throughput against interactivity",
                  f"Every plan of the serving space that fits ({int(shown.sum()):,} of {c.total:,}): output tokens/s "
                  "per GPU against tokens/s each user sees. The red steps are the Pareto front of the plans that run "
                  "from the search's checkpoint; hollow orange points need another (pre-quantized) checkpoint; "
                  "circles are the top plans, numbered by rank.", _png(fig))


def throughput_memory(data: ServingReportData):
    from .figures import SIZE, Figure, _plt, _png

    c = data.cloud
    if c is None or not np.isfinite(c.memory_gib).any():
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=SIZE)
    good = np.isfinite(c.memory_gib) & np.isfinite(c.per_gpu)
    ax.scatter(c.memory_gib[good & ~c.fits], c.per_gpu[good & ~c.fits], s=6, c="#cccccc", label="does not fit",
               rasterized=True)
    ax.scatter(c.memory_gib[good & c.fits], c.per_gpu[good & c.fits], s=6, c="#7fa7c9", label="fits", rasterized=True)
    tx = np.array([_number(p["estimate"], "memory_gib_per_gpu") for p in data.plans])
    ty = np.array([_number(p["estimate"], "output_tokens_per_s_per_gpu") for p in data.plans])
    ax.scatter(tx, ty, s=60, facecolors="none", edgecolors="black", lw=1.2, zorder=4, label="top plans")
    ax.axvline(data.capacity_gib, color="black", ls="--", lw=1, label=f"GPU memory {data.capacity_gib:g} GiB")
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_ylabel("output tokens/s per GPU")
    ax.legend(fontsize=8)
    return Figure("throughput_memory", "Throughput against memory",
                  "Every plan of the serving space: weights, KV cache and reserve per GPU against output tokens/s "
                  "per GPU; the dashed line is the GPU's memory.", _png(fig))


def latency(data: ServingReportData):
    from .figures import PALETTE, Figure, _plt, _png

    ttft = np.array([_number(p["estimate"], "ttft_ms") for p in data.plans])
    tpot = np.array([_number(p["estimate"], "tpot_ms") for p in data.plans])
    if not (np.isfinite(ttft).any() or np.isfinite(tpot).any()):
        return None
    plt = _plt()
    fig, axes = plt.subplots(1, 2, figsize=(8.0, 0.4 * len(data.plans) + 1.8), sharey=True)
    labels = [f"#{p['rank']} {p['layout']}" for p in data.plans]
    y = np.arange(len(data.plans))[::-1]
    for ax, values, name, target in ((axes[0], ttft, "time to first token (ms)", data.targets.get("ttft_ms")),
                                     (axes[1], tpot, "time per output token (ms)", data.targets.get("tpot_ms"))):
        ax.barh(y, np.where(np.isfinite(values), values, 0.0), color=PALETTE[0], height=0.7)
        if target:
            ax.axvline(target, color="black", ls="--", lw=1.2, label=f"target {target:g} ms")
            ax.legend(fontsize=7, loc="lower right")
        ax.set_xlabel(name)
        ax.grid(axis="y", visible=False)
    axes[0].set_yticks(y, labels, fontsize=8)
    return Figure("latency", "Latency of the top plans",
                  "Time to first token and time per output token of each top plan, against the targets of the "
                  "search (dashed).", _png(fig))


def memory_breakdown(data: ServingReportData):
    from ..tables import _PART_LABELS
    from .figures import PALETTE, Figure, _plt, _png

    parts_of = [p["estimate"].get("memory_breakdown_gib") for p in data.plans]
    if not any(isinstance(parts, dict) and parts for parts in parts_of):
        return None
    names: list[str] = []
    for parts in parts_of:
        for k in parts or {}:
            if k not in names and k != "kv_pool":  # the pool holds the KV cache: drawn as its free rest below
                names.append(k)
    plt = _plt()
    fig, ax = plt.subplots(figsize=(8.0, 0.45 * len(data.plans) + 1.6))
    y = np.arange(len(data.plans))[::-1]
    left = np.zeros(len(data.plans))
    for k, name in enumerate(names):
        width = np.array([_number(parts, name) if isinstance(parts, dict) else np.nan for parts in parts_of])
        width = np.where(np.isfinite(width), width, 0.0)
        ax.barh(y, width, left=left, color=PALETTE[k % len(PALETTE)], height=0.7,
                label=_PART_LABELS.get(name, name.replace("_", " ")))
        left += width
    pool = np.array([_number(parts, "kv_pool") - _number(parts, "kv_cache") if isinstance(parts, dict) else np.nan
                     for parts in parts_of])
    pool = np.where(np.isfinite(pool), np.maximum(pool, 0.0), 0.0)
    if pool.any():
        ax.barh(y, pool, left=left, color="white", edgecolor="grey", hatch="//", height=0.7,
                label="KV pool, not filled by the batch")
    # a disaggregated plan's bars are a decode GPU's parts; its prefill GPU's total is marked (it may be the fuller)
    prefill = np.array([_number(p.get("estimate") or {}, "prefill_memory_gib_per_gpu") for p in data.plans])
    if np.isfinite(prefill).any():
        ax.scatter(prefill, y, marker="D", color="black", s=22, zorder=3,
                   label="prefill GPU, total (disaggregated: the bars are a decode GPU)")
    ax.axvline(data.capacity_gib, color="black", ls="--", lw=1.2, label=f"GPU memory {data.capacity_gib:g} GiB")
    ax.set_yticks(y, [f"#{p['rank']} {p['layout']}" for p in data.plans], fontsize=8)
    ax.set_xlabel("GiB per GPU")
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.14), frameon=False)
    return Figure("memory_breakdown", "Memory of the top plans",
                  "Memory per GPU of each top plan by part (weights, the KV cache its batch fills, reserve; hatched: the rest of "
                  "the engine's KV pool), against the GPU's memory.",
                  _png(fig))


SERVING_FIGURES = (throughput_interactivity, throughput_memory, latency, memory_breakdown)


def serving_figures(data: ServingReportData) -> list:
    return [f for f in (draw(data) for draw in SERVING_FIGURES) if f is not None]


# --- HTML ----------------------------------------------------------------------------------------


def _cell(value: Any, fmt: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not np.isfinite(value):
        return "-"
    return format(value, fmt)


def render_serving(data: ServingReportData, figures: list) -> str:
    import base64

    from .html import _CSS, _SCRIPT

    e = _html.escape
    rows = []
    # a search without a latency target has no verdict to give (its table says "-", not "met")
    targets_set = data.targets_set
    for p in data.plans:
        est = p["estimate"]
        meets = est.get("meets_targets") if targets_set else None
        verdict = "meets" if meets else ("misses: " + str(est.get("misses", ""))) if meets is False else "-"
        if p.get("needs"):  # as the search's table says (NEEDS): it runs only from another checkpoint
            verdict += f"; {p['needs']}"
        rows.append(f"<tr><td class=n>{p['rank']}</td><td>{e(p['layout'])}</td><td>{e(p['text'])}</td>"
                    f"<td class=n>{_cell(est.get('output_tokens_per_s'), ',.0f')}</td>"
                    f"<td class=n>{_cell(est.get('output_tokens_per_s_per_gpu'), ',.0f')}</td>"
                    f"<td class=n>{_cell(est.get('tokens_per_s_per_user'), ',.1f')}</td>"
                    f"<td class=n>{_cell(est.get('ttft_ms'), ',.0f')}</td><td class=n>{_cell(est.get('tpot_ms'), ',.1f')}</td>"
                    f"<td class=n>{_cell(est.get('memory_gib_per_gpu'), '.1f')}</td><td>{e(verdict)}</td></tr>")
    head = ("<tr><th>#</th><th>layout</th><th>plan</th><th>out tok/s</th><th>tok/s/GPU</th><th>tok/s/user</th>"
            "<th>TTFT ms</th><th>TPOT ms</th><th>GiB/GPU</th><th>targets</th></tr>")
    best = data.plans[0]
    b = best["estimate"]
    summary = (f"Best plan: {e(best['layout'])} ({e(best['text'])}): {_cell(b.get('output_tokens_per_s'), ',.0f')} "
               f"output tokens/s ({_cell(b.get('output_tokens_per_s_per_gpu'), ',.0f')} per GPU), TTFT "
               f"{_cell(b.get('ttft_ms'), ',.0f')} ms, TPOT {_cell(b.get('tpot_ms'), ',.1f')} ms, "
               f"{_cell(b.get('memory_gib_per_gpu'), '.1f')} of {data.capacity_gib:g} GiB per GPU.")
    s = data.search
    if s:
        summary += (f"<br><span class=note>exact search: {_cell(s.get('evaluations'), ',')} plans evaluated of "
                    f"{_cell(s.get('space_size'), ',')}; {_cell(s.get('feasible'), ',')} fit, "
                    + (f"{_cell(s.get('meeting_targets'), ',')} meet the targets.</span>" if targets_set else
                       "no latency target set.</span>"))
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>autotune serving report: {e(data.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>autotune serving report</h1><p class=sub>{e(data.title)}</p>",
        f"<p class=summary>{summary}</p>",
        f"<h2>Top plans</h2><table>{head}{''.join(rows)}</table>"
        "<p class=note>Estimated again from the embedded model, hardware and request shape.</p>",
    ]
    for fig in figures:
        uri = "data:image/png;base64," + base64.b64encode(fig.png).decode("ascii")
        parts.append(f"<h2>{e(fig.title)}</h2><figure id={fig.name}><img src=\"{uri}\" alt=\"{e(fig.title)}\">"
                     f"<figcaption>{e(fig.caption)} <span class=note>(also {fig.name}.png)</span></figcaption></figure>")
    for note in data.notes:
        parts.append(f"<p class=note>{e(note)}</p>")
    parts.append("<p class=note>Estimates come from autotune's analytic serving model; `autotune validate` on serving "
                 "runs reports its measured error.</p>")
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts)


def serving_report(document: Mapping[str, Any], source: str, *, seed: int = 0,
                   progress: Callable[[str, int, int], None] | None = None) -> tuple[list, str]:
    """The figures and the report.html text of a serving plans.json (the caller writes them)."""
    data = gather_serving(document, source, seed=seed, progress=progress)
    figures = serving_figures(data)
    return figures, render_serving(data, figures)


__all__ = ["SERVING_FIGURES", "ServingCloud", "ServingReportData", "serving_report", "gather_serving",
           "render_serving", "serving_figures"]
