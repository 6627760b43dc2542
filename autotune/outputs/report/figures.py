"""The report's figures, drawn with matplotlib (Agg backend, no display needed).

Each function returns a :class:`Figure` (a name, a title, a caption and the PNG bytes),
or None when the data for it is missing.
"""

from __future__ import annotations

import io
from dataclasses import dataclass

import numpy as np

from ..tables import _PART_LABELS
from .data import ReportData

DPI = 110
SIZE = (8.0, 4.8)
# Colour-blind-safe palette (Okabe-Ito) for categories; the cloud is grey.
PALETTE = ["#0072B2", "#E69F00", "#009E73", "#D55E00", "#CC79A7", "#56B4E9", "#F0E442", "#000000",
           "#999999", "#882255", "#44AA99"]


@dataclass(frozen=True)
class Figure:
    name: str  # file stem, e.g. "throughput_memory"
    title: str
    caption: str
    png: bytes


def _plt():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    plt.rcParams.update({"figure.dpi": DPI, "axes.spines.top": False, "axes.spines.right": False,
                         "axes.grid": True, "grid.alpha": 0.3, "font.size": 9})
    return plt


def _png(fig) -> bytes:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=DPI, bbox_inches="tight", metadata={"Software": None})
    import matplotlib.pyplot as plt

    plt.close(fig)
    return buffer.getvalue()


def pareto_front(x: np.ndarray, y: np.ndarray, maximize_x: bool, maximize_y: bool) -> np.ndarray:
    """Indices of the non-dominated points, sorted by x."""
    sx = x if maximize_x else -x
    sy = y if maximize_y else -y
    order = np.lexsort((-sy, -sx))  # best x first, ties by best y
    front, best_y = [], -np.inf
    for i in order:
        if sy[i] > best_y:
            front.append(i)
            best_y = sy[i]
    front = np.array(front, dtype=int)
    return front[np.argsort(x[front])] if len(front) else front


def _top(data: ReportData, key: str) -> np.ndarray:
    return np.array([p["estimate"][key] for p in data.plans], dtype=float)


def throughput_memory(data: ReportData) -> Figure | None:
    if data.cloud is None:
        return None
    plt = _plt()
    c = data.cloud
    fig, ax = plt.subplots(figsize=SIZE)
    ax.scatter(c.memory_gib[~c.fits], c.tokens_per_s_per_gpu[~c.fits], s=4, c="#cccccc", alpha=0.5,
               label="does not fit", rasterized=True)
    ax.scatter(c.memory_gib[c.fits], c.tokens_per_s_per_gpu[c.fits], s=4, c="#7fa7c9", alpha=0.5,
               label="fits", rasterized=True)
    fx, fy = c.memory_gib[c.fits], c.tokens_per_s_per_gpu[c.fits]
    if len(fx):
        front = pareto_front(fx, fy, maximize_x=False, maximize_y=True)
        ax.step(fx[front], fy[front], where="post", color=PALETTE[3], lw=1.5)
        ax.scatter(fx[front], fy[front], s=22, color=PALETTE[3], zorder=3, label="Pareto front")
    tx, ty = _top(data, "memory_gib_per_gpu"), _top(data, "tokens_per_s_per_gpu")
    ax.scatter(tx, ty, s=60, facecolors="none", edgecolors="black", lw=1.2, zorder=4, label="top plans")
    for p, x, y in zip(data.plans[:5], tx, ty):
        ax.annotate(str(p["rank"]), (x, y), xytext=(4, 4), textcoords="offset points", fontsize=8)
    ax.axvline(data.capacity_gib, color="black", ls="--", lw=1, label=f"GPU memory {data.capacity_gib:g} GiB")
    ax.set_xlim(0, min(float(np.nanmax(c.memory_gib)) * 1.02, data.capacity_gib * 2.5))
    ax.set_xlabel("memory per GPU (GiB)")
    ax.set_ylabel("tokens/s per GPU")
    ax.legend(loc="lower right", fontsize=8, markerscale=1.5)
    sampled = f" (a random {len(c.fits):,} of {c.total:,})" if len(c.fits) < c.total else ""
    return Figure("throughput_memory", "Throughput against memory",
                  f"Every valid plan of the space{sampled}: {int(c.fits.sum()):,} fit. The red steps are the Pareto "
                  "front (no plan is both faster and leaner); circles are the top plans, numbered by rank.", _png(fig))


def throughput_cost(data: ReportData) -> Figure | None:
    plt = _plt()
    cap = data.capacity
    if cap and cap.get("candidates"):
        rows = [c for c in cap["candidates"] if c.get("plan")]
        if not rows:
            return None
        fig, ax = plt.subplots(figsize=SIZE)
        days = np.array([r["training_days"] for r in rows], dtype=float)
        cost = np.array([r["cost_usd"] for r in rows], dtype=float)
        for k, hw in enumerate(dict.fromkeys(r["hardware"] for r in rows)):
            idx = [i for i, r in enumerate(rows) if r["hardware"] == hw]
            ax.plot(cost[idx], days[idx], "o-", color=PALETTE[k % len(PALETTE)], label=hw, ms=5, lw=1)
            for i in idx:
                ax.annotate(f"{rows[i]['gpus']}", (cost[i], days[i]), xytext=(4, 3), textcoords="offset points",
                            fontsize=7)
        front = pareto_front(cost, days, maximize_x=False, maximize_y=False)
        ax.step(cost[front], days[front], where="post", color=PALETTE[3], lw=1.5, label="Pareto front")
        if cap.get("deadline_days"):
            ax.axhline(cap["deadline_days"], color="black", ls="--", lw=1, label=f"deadline {cap['deadline_days']:g} d")
        chosen = cap.get("chosen")
        if chosen:
            ax.scatter([chosen["cost_usd"]], [chosen["training_days"]], s=140, marker="*", color="black", zorder=5,
                       label="chosen")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("cost of the training run (USD)")
        ax.set_ylabel("days to train the budget")
        ax.legend(fontsize=8)
        return Figure("throughput_cost", "Time against cost, per GPU count and hardware",
                      "The best plan of each (hardware, GPU count) pair, labelled with its GPU count; the red steps "
                      "are the Pareto front (no pair is both cheaper and faster), the star the chosen plan.", _png(fig))
    if data.cloud is None:
        return None
    c = data.cloud
    fig, ax = plt.subplots(figsize=SIZE)
    fx, fy = c.cost_usd_per_mtok[c.fits], c.tokens_per_s_per_gpu[c.fits]
    ax.scatter(fx, fy, s=4, c="#7fa7c9", alpha=0.5, label="fits", rasterized=True)
    if len(fx):
        front = pareto_front(fx, fy, maximize_x=False, maximize_y=True)
        ax.scatter(fx[front], fy[front], s=40, color=PALETTE[3], zorder=3, label="Pareto front")
    tx, ty = _top(data, "cost_usd_per_million_tokens"), _top(data, "tokens_per_s_per_gpu")
    ax.scatter(tx, ty, s=60, facecolors="none", edgecolors="black", lw=1.2, zorder=4, label="top plans")
    ax.set_xlabel("USD per million tokens")
    ax.set_ylabel("tokens/s per GPU")
    ax.legend(loc="upper right", fontsize=8, markerscale=1.5)
    return Figure("throughput_cost", "Throughput against cost",
                  "Plans that fit. On one cluster the price per GPU-hour is fixed, so cost per token is the inverse "
                  "of throughput and the front is the fastest plan; search a GPU range (--gpus 64..2048) or several "
                  "--hardware profiles to see a real time/cost trade-off.", _png(fig))


def _labels(data: ReportData) -> list[str]:
    from ...training.plan import plan_from_fields
    from ..tables import settings_short

    out = []
    for p in data.plans[:10]:
        try:
            plan = plan_from_fields(p["plan"], int(data.inputs.get("gpus") or p["plan"]["dp"] * p["plan"]["tp"]
                                                   * p["plan"]["pp"] * p["plan"]["cp"]))
            out.append(f"#{p['rank']} {plan.layout()} {settings_short(plan)}")
        except (ValueError, KeyError, TypeError):
            out.append(f"#{p['rank']}")
    return out


def _stacked(data: ReportData, key: str, title: str, xlabel: str, name: str, caption: str,
             capacity: float | None = None) -> Figure | None:
    plans = data.plans[:10]
    if not plans:
        return None
    plt = _plt()
    parts = [k for k in plans[0]["estimate"][key] if any(p["estimate"][key].get(k, 0) > 0 for p in plans)]
    labels = _labels(data)
    fig, ax = plt.subplots(figsize=(SIZE[0], 0.45 * len(plans) + 1.6))
    y = np.arange(len(plans))[::-1]
    left = np.zeros(len(plans))
    for k, part in enumerate(parts):
        width = np.array([p["estimate"][key].get(part, 0.0) for p in plans], dtype=float)
        ax.barh(y, width, left=left, color=PALETTE[k % len(PALETTE)], label=_PART_LABELS.get(part, part.replace("_", " ")),
                height=0.7)
        left += width
    if capacity is not None:
        ax.axvline(capacity, color="black", ls="--", lw=1.2, label=f"GPU memory {capacity:g} GiB")
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlabel(xlabel)
    ax.grid(axis="y", visible=False)
    ax.legend(fontsize=7, ncol=4, loc="upper center", bbox_to_anchor=(0.5, -0.14 - 0.02 * (10 - len(plans))),
              frameon=False)
    return Figure(name, title, caption, _png(fig))


def step_breakdown(data: ReportData) -> Figure | None:
    return _stacked(data, "time_breakdown_s", "Step time of the top plans", "seconds per step",
                    "step_breakdown", "Where each top plan's step goes: compute, recomputation, communication of "
                    "each parallel dimension (what is not hidden behind compute), pipeline bubble, optimizer.")


def memory_breakdown(data: ReportData) -> Figure | None:
    return _stacked(data, "memory_breakdown_gib", "Memory of the top plans", "GiB per GPU",
                    "memory_breakdown", "Memory per GPU of each top plan by part, against the GPU's memory (dashed).",
                    capacity=data.capacity_gib)


def convergence(data: ReportData) -> Figure | None:
    h = data.history
    if h is None:
        return None
    plt = _plt()
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=SIZE)
    names = {"tpe": "TPE", "random": "random search", "recorded": "this search"}
    for k, (sampler, curve) in enumerate(h.curves.items()):
        ax.plot(np.arange(1, len(curve) + 1), curve, color=PALETTE[k], lw=1.8, label=names.get(sampler, sampler))
    if h.optimum is not None:
        ax.axhline(h.optimum, color="black", ls="--", lw=1, label="exact optimum")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax.set_xlabel(h.xlabel)
    ax.set_ylabel(f"best {h.objective} so far ({h.unit})")
    ax.legend(fontsize=8)
    return Figure("convergence", "Search convergence",
                  h.caption or f"Best {h.objective} found after each evaluation, TPE and random search at the same "
                  f"budget of {h.budget} evaluations (seed fixed); the dashed line is the optimum from evaluating "
                  "every plan.", _png(fig))


def importance(data: ReportData) -> Figure | None:
    if not data.importance:
        return None
    plt = _plt()
    items = sorted(data.importance.items(), key=lambda kv: kv[1])
    fig, ax = plt.subplots(figsize=(SIZE[0], 0.35 * len(items) + 1.2))
    ax.barh([k for k, _ in items], [v for _, v in items], color=PALETTE[0])
    ax.set_xlabel("importance (share)")
    ax.grid(axis="y", visible=False)
    return Figure("importance", "Parameter importance", data.importance_method + ": how much each axis of the "
                  "space moves the objective.", _png(fig))


def measured_predicted(data: ReportData) -> Figure | None:
    """A tune study: each successful benchmark run's measured throughput against the cost model's prediction."""
    runs = [r for r in data.measured or [] if r["outcome"] == "ok" and r["measured_tokens_per_s_per_gpu"]
            and r["predicted_tokens_per_s_per_gpu"]]
    if not runs:
        return None
    plt = _plt()
    fig, ax = plt.subplots(figsize=SIZE)
    pred = np.array([r["predicted_tokens_per_s_per_gpu"] for r in runs], dtype=float)
    meas = np.array([r["measured_tokens_per_s_per_gpu"] for r in runs], dtype=float)
    top = float(max(pred.max(), meas.max())) * 1.06
    low = float(min(pred.min(), meas.min())) * 0.85
    line = np.array([low, top])
    ax.plot(line, line, color="black", lw=1, label="measured = predicted")
    ax.fill_between(line, line * 0.9, line * 1.1, color="#999999", alpha=0.2, lw=0, label="within 10%")
    ax.scatter(pred, meas, s=36, color=PALETTE[0], zorder=3, label="benchmark runs")
    for r, x, y in zip(runs, pred, meas):
        ax.annotate(str(r["trial"]), (x, y), xytext=(4, 3), textcoords="offset points", fontsize=7)
    ax.set_xlim(low, top)
    ax.set_ylim(low, top)
    ax.set_xlabel("predicted tokens/s per GPU (cost model)")
    ax.set_ylabel("measured tokens/s per GPU")
    ax.legend(fontsize=8, loc="upper left")
    errors = np.abs(pred / meas - 1.0) * 100.0
    failed = sum(1 for r in data.measured or [] if r["outcome"] != "ok")
    return Figure("measured_predicted", "Measured against predicted",
                  f"Each benchmark run that succeeded ({len(runs)}), labelled with its trial number: measured "
                  f"throughput against the cost model's prediction; mean absolute error {errors.mean():.1f}%. "
                  f"{failed} runs failed or ran out of memory (listed in the table below).", _png(fig))


FIGURES = (throughput_memory, throughput_cost, step_breakdown, memory_breakdown, convergence, importance,
           measured_predicted)


def all_figures(data: ReportData) -> list[Figure]:
    return [f for f in (draw(data) for draw in FIGURES) if f is not None]
