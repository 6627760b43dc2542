"""What a person reads: rich tables and one-line summaries of plans, searches and comparisons."""

from __future__ import annotations

import math

from typing import Any

from rich.table import Table

from ..inputs.framework import Framework
from ..search import capacity as cap
from ..search.result import SearchResult
from ..training.confidence import short_text as confidence_short
from ..training.plan import Plan, plan_from_fields


def framework_text(framework: Framework, defaulted: bool) -> str:
    """``megatron-lm (newest profiled, the default)`` or ``nemo@24.07``."""
    return framework.label + (" [default]" if defaulted else "")


def search_header(problem, calibration: str | None = None) -> str:
    """What was searched: the framework, the precisions and the memory headroom (and whether the GPU is calibrated:
    by the --calibration overlay ``calibration`` names, or uncalibrated)."""
    fw = problem.framework
    hw = problem.cluster.hardware
    searched = tuple(problem.choices["precision"])
    precisions = ", ".join(searched)
    # the lower precisions the GPU (and, for fp4, the framework) could also train in, never searched silently
    unsearched = [p for p in ("fp8", "fp4") if p not in searched and hw.supports(p)
                  and (fw.supports_fp8() if p == "fp8" else fw.supports_fp4())]
    hint = (f" (add --precision {','.join(dict.fromkeys((*searched, *unsearched)))} to search "
            f"{' and '.join(unsearched)})" if unsearched else "")
    text = (f"framework {fw.label}; precision searched: {precisions}" + hint
            + f"; plans keep {problem.memory_headroom:.0%} of HBM free")
    if calibration is not None:
        text += f"; {hw.name} efficiencies from the calibration overlay {calibration}"
    elif not hw.calibrated:
        text += f"; {hw.name} is uncalibrated (efficiencies derived, docs/cost-model.md)"
    return text

_PART_LABELS = {
    "compute": "compute", "recompute": "recompute", "tp_comm": "TP comm", "cp_comm": "CP comm",
    "ep_comm": "EP comm", "host_bound": "host-bound", "pp_comm": "PP comm", "pipeline_bubble": "pipeline bubble", "dp_comm": "DP comm",
    "optimizer": "optimizer", "offload": "offload", "overhead": "overhead",
}


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


# Two estimates this close are one answer to the cost model (its held-out error is several percent), so
# a plan whose features validated runs used is worth naming beside a best that rests on features none did.
VALIDATED_ALTERNATIVE_WITHIN = 0.01


def validated_alternative(result: SearchResult) -> str | None:
    """A sentence naming the best-ranked plan within 1% of the best on the objective whose features all
    have validated runs, when the best's do not (None otherwise, and for a Pareto set)."""
    if result.pareto or len(result.ranked) < 2:
        return None
    best = result.ranked[0]
    unvalidated = (best.estimate.get("confidence") or {}).get("unvalidated")
    if not unvalidated:
        return None
    name, value = next(iter(best.objective_values.items()))
    for other in result.ranked[1:]:
        other_value = other.objective_values.get(name)
        if other_value is None or abs(other_value - value) > VALIDATED_ALTERNATIVE_WITHIN * abs(value):
            break
        if (other.estimate.get("confidence") or {}).get("unvalidated"):
            continue
        gap_pct = abs(other_value - value) / abs(value) * 100 if value else 0.0
        return (f"#{other.rank} {other.plan.layout()} ({settings_text(other.plan)}) is within {gap_pct:.1f}% of it "
                f"and uses only features that validated runs used, where no validated run had the best's "
                f"{'; '.join(unvalidated)}. The gap is inside the estimate's error: prefer #{other.rank} unless you "
                f"have measured the best.")
    return None


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


# --- serving ---------------------------------------------------------------------------------------


def ms_text(value: float | None, digits: int = 0) -> str:
    """A latency in ms for a table cell; none is an unbounded queue (the load exceeds what the plan serves)."""
    return "inf" if value is None else f"{value:,.{digits}f}"


def latency_text(value: float | None, digits: int = 0) -> str:
    """A latency in a sentence: "1,234 ms", or "unbounded" where the queue grows without end."""
    return "unbounded (the load exceeds what the plan serves)" if value is None else f"{value:,.{digits}f} ms"


def _missed(estimate: dict) -> str:
    """The targets a plan misses, by name (``misses`` reads "TTFT 1,655 > 100 ms; TPOT ...")."""
    if not estimate.get("fits", True):
        return "does not fit"
    names = [part.split()[0] for part in estimate.get("misses", "").split("; ") if part]
    return "miss " + ", ".join(names) if names else "miss"


def serving_plans_table(result, capacity_gib: float, *, targets_set: bool = True) -> Table:
    table = Table(title=f"Top {len(result.ranked)} serving plans", header_style="bold",
                  caption="tok/s: output tokens/s of the deployment (/GPU, /user: per GPU, per user); "
                          "w/kv: weight and KV-cache precision; from: ckpt = read from the checkpoint, online = "
                          "quantized at load, NEEDS = another checkpoint (see --json); batch: the engine's limit "
                          "(fit: what its KV budget holds); GiB: what the plan needs per GPU (the engine's budget)",
                  caption_justify="left")
    # the rank and the layout keep their width; the targets column names the missed targets (their values
    # are in the TTFT and TPOT columns and in --json), so a table of misses fits a terminal
    layout_width = min(max((len(r.plan.layout()) for r in result.ranked), default=6), 12)
    widths = {"#": {"min_width": len(str(len(result.ranked)))}, "layout": {"min_width": layout_width}}
    for name in ("#", "layout", "w/kv", "from", "batch", "tok/s", "/GPU", "/user", "TTFT ms", "TPOT ms", "fit",
                 "GiB (budget)", "targets"):
        table.add_column(name, justify="left" if name in ("layout", "w/kv", "from", "targets") else "right",
                         no_wrap=name != "layout", **widths.get(name, {}))
    for r in result.ranked:
        p, e = r.plan, r.estimate
        source = {"checkpoint": "ckpt", "online": "online", "needs": "NEEDS"}.get(e.get("weights_from", ""), "")
        table.add_row(str(r.rank), p.layout(), f"{p.weights}/{p.kv}", source, str(p.max_batch),
                      number_text(e["output_tokens_per_s"], ",.0f"),
                      number_text(e["output_tokens_per_s_per_gpu"], ",.0f"),
                      f"{e['tokens_per_s_per_user']:,.1f}", ms_text(e["ttft_ms"]), ms_text(e["tpot_ms"], 1),
                      str(e["max_batch_fit"]), f"{e['memory_gib_per_gpu']:.1f} ({e.get('memory_budget_gib', capacity_gib):.0f})",
                      ("met" if e["meets_targets"] else _missed(e)) if targets_set else "-")
    return table


# --- capacity planning -------------------------------------------------------------------------------


def candidate_text(c: cap.Candidate) -> str:
    plan = plan_from_fields(c.plan, c.gpus)
    t = c.totals
    return (f"{c.gpus:,} x {c.hardware} ({_count(max(1, -(-c.gpus // c.gpus_per_node)), 'node')}), {plan.layout()} "
            f"{settings_short(plan)}: {t['training_days']:,.1f} days, {t['gpu_hours']:,.0f} GPU-hours, "
            f"${t['cost_usd']:,.0f}, {t['energy_mwh']:,.0f} MWh, {t['co2e_t']:,.0f} t CO2e")


def capacity_table(found: cap.CapacityResult) -> Table:
    table = Table(title="Best plan per hardware and GPU count", header_style="bold")
    for name, justify in (("hardware", "left"), ("GPUs", "right"), ("layout", "left"), ("tok/s/GPU", "right"),
                          ("days", "right"), ("GPU-hours", "right"), ("cost $", "right"), ("MWh", "right"),
                          ("t CO2e", "right"), ("", "left")):
        # a row without a plan says why in the layout column, wrapped there rather than squeezing the others
        table.add_column(name, justify=justify, no_wrap=name != "layout")
    for c in found.candidates:
        if c.plan is None:
            table.add_row(c.hardware, f"{c.gpus:,}", f"[dim]{c.note}[/]", "", "", "", "", "", "", "")
            continue
        t = c.totals
        marks = []
        if c is found.chosen:
            marks.append("[bold green]chosen[/]")
        if c is found.fastest:
            marks.append("fastest")
        if found.deadline_days and not c.meets_deadline:
            marks.append("[dim]late[/]")
        plan = plan_from_fields(c.plan, c.gpus)
        table.add_row(c.hardware, f"{c.gpus:,}", plan.layout(), f"{c.estimate['tokens_per_s_per_gpu']:,.0f}",
                      f"{t['training_days']:,.1f}", f"{t['gpu_hours']:,.0f}", f"{t['cost_usd']:,.0f}",
                      f"{t['energy_mwh']:,.0f}", f"{t['co2e_t']:,.0f}", " ".join(marks))
    return table


# --- explain -----------------------------------------------------------------------------------------


def sensitivity_table(found) -> Table:
    table = Table(title="One step along each axis", header_style="bold",
                  caption="step and memory change against this plan; rules are the search space's validity rules",
                  caption_justify="left")
    for name, justify in (("change", "left"), ("step s", "right"), ("step", "right"), ("GiB/GPU", "right"),
                          ("memory", "right"), ("verdict", "left")):
        table.add_column(name, justify=justify)
    for row in found.sensitivity:
        if row.step_time_s is None:
            table.add_row(row.change, "-", "-", "-", "-", f"[dim]impossible: {row.reason}[/]")
            continue
        if row.reason:
            verdict = f"[dim]breaks a rule: {row.reason}[/]"
        elif not row.fits:
            if found.memory_limit_gib is not None and row.memory_gib <= found.capacity_gib:
                over = f"{row.memory_gib - found.memory_limit_gib:+.1f} GiB over what the search let plans use"
            else:
                over = f"{row.memory_gib - found.capacity_gib:+.1f} GiB over"
            verdict = f"[red]does not fit[/] ({over})"
        else:
            verdict = "[green]fits[/]"
        table.add_row(row.change, f"{row.step_time_s:.2f}", f"{row.step_time_change:+.1%}", f"{row.memory_gib:.1f}",
                      f"{row.memory_change_gib:+.1f}", verdict)
    return table


# --- explain a serve plan --------------------------------------------------------------------------
# Estimate fields are read with .get: a field the serving model no longer has shows as "-".

def number_text(value: float, fmt: str) -> str:
    """``value`` in ``fmt``, or in three significant digits where ``fmt`` would print a non-zero value as 0 or
    print it with 13 or more digits (a cost per token at a request rate of 1e-30/s)."""
    text = format(value, fmt)
    if value and math.isfinite(value) and (abs(value) >= 1e12 or not any(c in "123456789" for c in text)):
        return format(value, ".3g")
    return text


def _cell(value: Any, fmt: str) -> str:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return "-" if value is None else str(value)
    return number_text(value, fmt)


SERVING_FIELDS = (
    ("output_tokens_per_s", "output tokens/s (all replicas)", ",.0f"),
    ("output_tokens_per_s_per_gpu", "output tokens/s per GPU", ",.0f"),
    ("tokens_per_s_per_user", "tokens/s per user", ",.1f"),
    ("ttft_ms", "time to first token, ms", ",.0f"),
    ("tpot_ms", "time per output token, ms", ",.1f"),
    ("batch", "sequences in flight per replica", ",.1f"),
    ("max_batch_fit", "sequences the KV cache holds per replica", ",.0f"),
    ("requests_per_s", "requests/s", ",.2f"),
    ("decode_bound", "decode is bound by", ""),
)


def serving_estimate_tables(estimate: dict[str, Any], capacity_gib: float) -> tuple[Table, Table]:
    """The serving estimate (throughput, latency, batch) and its memory by part."""
    numbers = Table(title="Serving estimate", header_style="bold")
    numbers.add_column("quantity")
    numbers.add_column("value", justify="right")
    for key, label, fmt in SERVING_FIELDS:
        if key in estimate:
            value = estimate[key]
            shown = "inf" if value is None and key in ("ttft_ms", "tpot_ms") else _cell(value, fmt)
            numbers.add_row(label, shown)
    prefill = estimate.get("prefill_memory_gib_per_gpu")
    disagg = isinstance(prefill, (int, float)) and not isinstance(prefill, bool)
    # The title holds the plan's figure, the one search ranks and shows (disaggregated: the fuller pool's GPU); the
    # parts are a decode GPU's, then each pool's total (a reader compared a decode GPU's total with search's figure)
    title = f"Memory {_cell(estimate.get('memory_gib_per_gpu'), '.1f')} of {capacity_gib:g} GiB per GPU"
    memory = Table(title=title + (" (the fuller pool's); a decode GPU's parts" if disagg else ""), header_style="bold")
    memory.add_column("part")
    memory.add_column("GiB", justify="right")
    for key, value in (estimate.get("memory_breakdown_gib") or {}).items():
        if isinstance(value, (int, float)) and value > 0:
            memory.add_row(key.replace("_", " "), f"{value:.2f}")
    if disagg:
        memory.add_row("decode GPU, total", _cell(estimate.get("decode_memory_gib_per_gpu"), ".2f"))
        memory.add_row("prefill GPU, total", _cell(prefill, ".2f"))
    return numbers, memory


def serving_sensitivity_table(found, *, targets_set: bool = True) -> Table:
    table = Table(title="One step along each axis", header_style="bold",
                  caption="output tokens/s and latency against this plan; targets: the --ttft-ms/--tpot-ms/--request-rate "
                          "of the search", caption_justify="left")
    for name, justify in (("change", "left"), ("out tok/s", "right"), ("change", "right"), ("TTFT ms", "right"),
                          ("TPOT ms", "right"), ("GiB/GPU", "right"), ("verdict", "left")):
        table.add_column(name, justify=justify)
    for row in found.sensitivity:
        e = row.estimate
        if e is None:
            table.add_row(row.change, "-", "-", "-", "-", "-", f"[dim]impossible: {row.reason}[/]")
            continue
        if not row.fits:
            verdict = f"[red]cannot run[/] ({row.reason or 'does not fit'})"
        elif not row.meets_targets:
            verdict = f"[yellow]misses[/] {e.get('misses', 'a target')}"
        else:  # with no target set there is nothing to meet: the step runs
            verdict = "[green]meets the targets[/]" if targets_set else "[green]runs[/]"
        change = "-" if row.throughput_change is None else f"{row.throughput_change:+.1%}"
        table.add_row(row.change, _cell(e.get("output_tokens_per_s"), ",.0f"), change,
                      ms_text(e.get("ttft_ms")), ms_text(e.get("tpot_ms"), 1), _cell(e.get("memory_gib_per_gpu"), ".1f"),
                      verdict)
    return table


def _count(n: int, noun: str) -> str:
    return f"{n:,} {noun}{'' if n == 1 else 's'}"
