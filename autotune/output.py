"""What a person reads: rich tables and one-line summaries; and plans.json / plans.csv files."""

from __future__ import annotations

import csv
import json
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from .confidence import short_text as confidence_short
from .errors import InputError
from .framework import Framework
from .plan import PRECISION, Plan
from .search.result import SearchResult

# The precisions `search` plans in unless --precision names others: fp8 is never chosen silently.
DEFAULT_PRECISIONS: tuple[str, ...] = ("bf16",)


def parse_precisions(text: str | None) -> tuple[str, ...]:
    """``--precision bf16,fp8`` -> ("bf16", "fp8"); None -> :data:`DEFAULT_PRECISIONS`."""
    if text is None:
        return DEFAULT_PRECISIONS
    names = tuple(dict.fromkeys(p.strip() for p in text.split(",") if p.strip()))
    bad = [n for n in names if n not in PRECISION]
    if not names or bad:
        raise InputError(f"must be a comma-separated list of {', '.join(PRECISION)}, but got {text!r}",
                         field="--precision")
    return names


def framework_text(framework: Framework, defaulted: bool) -> str:
    """``megatron-lm (newest profiled, the default)`` or ``nemo@24.07``."""
    return framework.label + (" [default]" if defaulted else "")


def search_header(problem) -> str:
    """What was searched: the framework, the precisions and the memory headroom (and whether the GPU is calibrated)."""
    fw = problem.framework
    hw = problem.cluster.hardware
    precisions = ", ".join(problem.choices["precision"])
    text = (f"framework {fw.label}; precision searched: {precisions}"
            + ("" if "fp8" in problem.choices["precision"] or not hw.supports("fp8")
               else " (add --precision bf16,fp8 to search fp8)")
            + f"; plans keep {problem.memory_headroom:.0%} of HBM free")
    if not hw.calibrated:
        text += f"; {hw.name} is uncalibrated (efficiencies derived, docs/cost-model.md)"
    return text

_PART_LABELS = {
    "compute": "compute", "recompute": "recompute", "tp_comm": "TP comm", "cp_comm": "CP comm",
    "ep_comm": "EP comm", "pp_comm": "PP comm", "pipeline_bubble": "pipeline bubble", "dp_comm": "DP comm",
    "optimizer": "optimizer", "offload": "offload", "overhead": "overhead",
}


def add_training_totals(estimate: dict[str, Any], n_gpus: int, tokens: float | None, price: float, tokens_per_step: int) -> dict[str, Any]:
    """Total time, GPU-hours and money to train ``tokens`` (when given)."""
    if tokens is None:
        return estimate
    seconds = tokens / (estimate["tokens_per_s_per_gpu"] * n_gpus)
    gpu_hours = seconds / 3600.0 * n_gpus
    return {**estimate, "training_days": seconds / 86400.0, "gpu_hours": gpu_hours, "cost_usd": gpu_hours * price,
            "steps": tokens / tokens_per_step}


def settings_text(plan: Plan) -> str:
    recompute = "no recompute" if plan.recompute == "none" else f"{plan.recompute} recompute"
    parts = [f"ZeRO-{plan.zero}", f"micro-batch {plan.mbs}", recompute, plan.precision]
    if plan.offload != "none":
        parts.append("optimizer offload")
    return ", ".join(parts)


def largest_parts(estimate: dict[str, Any], n: int = 3) -> str:
    step = estimate["step_time_s"]
    parts = sorted(estimate["time_breakdown_s"].items(), key=lambda kv: -kv[1])
    return ", ".join(f"{_PART_LABELS.get(k, k)} {v / step:.0%}" for k, v in parts[:n] if v > 0)


def winner_sentence(plan: Plan, estimate: dict[str, Any], capacity_gib: float) -> str:
    text = (
        f"Best: {plan.layout()} with {settings_text(plan)}: {estimate['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU "
        f"(MFU {estimate['mfu']:.0%} of the {estimate.get('mfu_peak', 'bf16')} peak), "
        f"{estimate['memory_gib_per_gpu']:.1f} of {capacity_gib:g} GiB per GPU; "
        f"step {estimate['step_time_s']:.2f} s ({largest_parts(estimate)})."
    )
    if "training_days" in estimate:
        text += (f" Training the budget takes {estimate['training_days']:,.1f} days, "
                 f"{estimate['gpu_hours']:,.0f} GPU-hours, ${estimate['cost_usd']:,.0f}.")
    return text


def settings_short(plan: Plan) -> str:
    """Compact settings for a table cell, e.g. ``Z1 mb2 full fp8``."""
    recompute = {"none": "norc", "selective": "sel", "full": "full"}[plan.recompute]
    text = f"Z{plan.zero} mb{plan.mbs} {recompute} {plan.precision}"
    return text + (" off" if plan.offload != "none" else "")


def plans_table(result: SearchResult, capacity_gib: float) -> Table:
    title = "Pareto set" if result.pareto else f"Top {len(result.ranked)} plans"
    table = Table(title=title, header_style="bold", caption="settings: ZeRO stage, micro-batch, recompute "
                  "(norc = none, sel = selective), precision, off = optimizer offload; MFU against the dense peak of "
                  "the plan's precision; (+N same): N other plans with the same estimate (--json lists them); err band: "
                  "predicted vs "
                  "measured on validated runs like it (! = a feature no validated run used; see --json)", caption_justify="left")
    for name, justify in (("#", "right"), ("layout", "left"), ("settings", "left"), ("step s", "right"),
                          ("tok/s/GPU", "right"), ("MFU (peak)", "right"), ("GiB/GPU (free)", "right"), ("$/Mtok", "right"),
                          ("err band", "right")):
        table.add_column(name, justify=justify, no_wrap=True)
    for ranked in result.ranked:
        p, e = ranked.plan, ranked.estimate
        same = f" (+{len(ranked.equivalents)} same)" if ranked.equivalents else ""
        table.add_row(
            str(ranked.rank), p.layout() + same, settings_short(p), f"{e['step_time_s']:.2f}",
            f"{e['tokens_per_s_per_gpu']:,.0f}", f"{e['mfu']:.1%} {e.get('mfu_peak', 'bf16')}",
            f"{e['memory_gib_per_gpu']:.1f} ({capacity_gib - e['memory_gib_per_gpu']:.1f})",
            f"{e['cost_usd_per_million_tokens']:.3f}",
            confidence_short(e.get("confidence")),
        )
    return table


def breakdown_tables(estimate: dict[str, Any], capacity_gib: float) -> tuple[Table, Table]:
    step = estimate["step_time_s"]
    times = Table(title=f"Step time {step:.3f} s", header_style="bold")
    times.add_column("part")
    times.add_column("seconds", justify="right")
    times.add_column("share", justify="right")
    for key, value in estimate["time_breakdown_s"].items():
        if value > 0:
            times.add_row(_PART_LABELS.get(key, key), f"{value:.4f}", f"{value / step:.1%}")
    memory = Table(title=f"Memory {estimate['memory_gib_per_gpu']:.1f} of {capacity_gib:g} GiB per GPU", header_style="bold")
    memory.add_column("part")
    memory.add_column("GiB", justify="right")
    for key, value in estimate["memory_breakdown_gib"].items():
        if value > 0:
            memory.add_row(key.replace("_", " "), f"{value:.2f}")
    return times, memory


def prepare_out_dir(path: Path, force: bool) -> None:
    """Create ``path``; refuse a non-empty folder unless ``force`` (never lose a user's files silently)."""
    if path.exists() and not path.is_dir():
        raise InputError("exists and is not a folder; choose another --out", source=str(path))
    if path.is_dir() and any(path.iterdir()) and not force:
        raise InputError("folder is not empty; choose another --out, or pass --force to overwrite its plans files",
                         source=str(path))
    path.mkdir(parents=True, exist_ok=True)


def write_plans(path: Path, document: dict[str, Any]) -> list[Path]:
    json_path = path / "plans.json"
    json_path.write_text(json.dumps(document, indent=2) + "\n")
    csv_path = path / "plans.csv"
    rows = []
    for entry in document["plans"]:
        row = {"rank": entry["rank"], **entry["plan"]}
        est = entry["estimate"]
        row.update({k: v for k, v in est.items() if not isinstance(v, dict)})
        row.update({f"time_{k}_s": v for k, v in est["time_breakdown_s"].items()})
        row.update({f"memory_{k}_gib": v for k, v in est["memory_breakdown_gib"].items()})
        rows.append({k: (str(v).lower() if isinstance(v, bool) else v) for k, v in row.items()})
    with open(csv_path, "w", newline="") as handle:
        if rows:
            writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    return [json_path, csv_path]


def stderr_console() -> Console:
    return Console(stderr=True)
