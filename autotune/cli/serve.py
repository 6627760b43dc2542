"""``autotune search/predict --workload serve``, serving validation and serving launch commands (effects here).

``cli.py`` hands over to :func:`search_serve` and :func:`predict_serve` when ``--workload serve``;
``cli_accuracy.validate`` hands over to :func:`validate_serving_csv` when the CSV has the serving
columns; :func:`emit_serving` writes ``vllm serve`` / ``sglang.launch_server`` commands.
"""

from __future__ import annotations

import csv
import json
import re
from pathlib import Path
from typing import Any

from rich.table import Table

from ..errors import InputError
from ..inputs.hardware import load_hardware
from ..inputs.request import cluster_from_options
from ..inputs.modelspec import load_model
from ..serving.plan import ServePlanBatch, ServeWorkload, parse_serve_fields, serve_plan_from_fields

WORKLOADS = ("train", "serve")


def check_workload(workload: str) -> str:
    if workload not in WORKLOADS:
        raise InputError(f"must be train or serve, but got {workload!r}", field="--workload")
    return workload


def parse_gpus(text: str | int | None) -> tuple[int, int] | None:
    """``8`` -> (8, 8); ``1..64`` -> (1, 64)."""
    if text is None:
        return None
    found = re.fullmatch(r"\s*(\d+)\s*(?:\.\.\s*(\d+)\s*)?", str(text))
    if not found:
        raise InputError(f"must be a count (8) or a range (1..64), but got {text!r}", field="--gpus")
    low = int(found.group(1))
    high = int(found.group(2) or low)
    if low < 1 or high < low:
        raise InputError(f"needs 1 <= low <= high, but got {text!r}", field="--gpus")
    return low, high


def serve_workload(input_len: int | None, output_len: int | None, ttft_ms: float | None, tpot_ms: float | None,
                   concurrency: int | None, request_rate: float | None) -> ServeWorkload:
    if input_len is None:
        raise InputError("serving needs the prompt length: --input-len TOKENS", field="--input-len")
    if output_len is None:
        raise InputError("serving needs the output length: --output-len TOKENS", field="--output-len")
    return ServeWorkload(input_len, output_len, ttft_ms, tpot_ms, concurrency, request_rate)


def _hardware(name: str, price: float | None):
    hw = load_hardware(name)
    if price is not None:
        if price < 0:
            raise InputError(f"must be >= 0 USD per GPU-hour, but got {price}", field="--price")
        hw = hw.with_price(price)
    return hw


def _inputs_json(model, hw, n_gpus, gpn, workload: ServeWorkload, space: str | None, params_note: str) -> dict:
    return {
        "workload": "serve", "model": model.name, "hardware": hw.name, "gpus": n_gpus, "gpus_per_node": gpn,
        "input_len": workload.input_len, "output_len": workload.output_len, "ttft_ms": workload.ttft_ms,
        "tpot_ms": workload.tpot_ms, "concurrency": workload.concurrency, "request_rate": workload.request_rate,
        "mode": workload.mode, "space": space or "search_spaces/serve.yaml", "parameters": params_note,
    }


def search_serve(*, model: str, hardware: str, gpus: str | None, gpus_per_node: int | None, nodes: int | None,
                 workload: ServeWorkload, space: str | None, fixes: list[str], top: int, json_out: bool,
                 out: Path | None, price: float | None, stdout, stderr) -> int:
    """Run the serving search and print it; returns the exit status."""
    from ..serving.calibrated import params_for_gpu
    from ..search.serving import capacity_search, serve_search
    from ..serving.space import load_serve_space

    spec = load_model(model)
    hw = _hardware(hardware, price)
    params, note = params_for_gpu(hw.name)
    fixed = {}
    for item in fixes:
        try:
            fixed.update({k: v for k, v in parse_serve_fields(item).items() if k != "replicas"})
        except ValueError as exc:
            raise InputError(f"{exc} (use e.g. --fix tp=4)", field="--fix") from None
    search_space = load_serve_space(space).fixed(fixed)
    gpn = gpus_per_node or hw.gpus_per_node
    bounds = parse_gpus(gpus)
    capacity = None
    if bounds is not None and bounds[0] != bounds[1]:
        if workload.request_rate is None:
            raise InputError("a GPU range finds the fewest GPUs for a request rate: add --request-rate R",
                             field="--gpus")
        capacity = capacity_search(spec, hw, gpn, bounds[0], bounds[1], workload, search_space, params, top=top)
        result = capacity.result
        n_gpus = capacity.n_gpus
    else:
        cluster = cluster_from_options(hw, bounds[0] if bounds else None, gpus_per_node, nodes)
        result = serve_search(spec, cluster, workload, search_space, params, top=top)
        n_gpus, gpn = cluster.n_gpus, cluster.gpus_per_node
    document: dict[str, Any] = result.to_json() if result else {"plans": [], "search": {}}
    document["inputs"] = _inputs_json(spec, hw, n_gpus, min(gpn, n_gpus or gpn), workload, space, note)
    if capacity is not None:
        document["capacity"] = {"gpus": capacity.n_gpus, "tried": [{"gpus": g, "meeting_targets": m} for g, m in capacity.tried]}
    if out is not None:
        from ..outputs.tables import prepare_out_dir

        prepare_out_dir(out, True)
        (out / "plans.json").write_text(json.dumps(document, indent=2) + "\n")
    if json_out:
        print(json.dumps(document))
        return 0 if result and result.ranked else 1
    load = {"max-throughput": "maximum throughput (all requests queued)",
            "concurrency": f"{workload.concurrency} concurrent users",
            "rate": f"{workload.request_rate or 0:g} requests/s"}[workload.mode]
    targets = ", ".join(t for t in (f"TTFT <= {workload.ttft_ms:g} ms" if workload.ttft_ms else "",
                                    f"TPOT <= {workload.tpot_ms:g} ms" if workload.tpot_ms else "") if t) or "none"
    if capacity is not None:
        tried = ", ".join(f"{g}: {m}" for g, m in capacity.tried)
        if capacity.n_gpus is None:
            stdout.print(f"No GPU count in {gpus} serves {workload.request_rate:g} requests/s within the targets "
                         f"(GPUs: plans meeting them: {tried}).", highlight=False, soft_wrap=True)
            return 1
        stdout.print(f"[bold]Fewest GPUs: {capacity.n_gpus}[/] serve {workload.request_rate:g} requests/s within "
                     f"the targets (GPUs tried: plans meeting them: {tried}).", highlight=False, soft_wrap=True)
    stdout.print(f"[bold]{spec.name}[/] serving on {n_gpus} x {hw.name}; input {workload.input_len}, output "
                 f"{workload.output_len} tokens; load: {load}; targets: {targets}", highlight=False)
    stdout.print(f"[dim]{note}[/]", highlight=False)
    if result.ranked:
        stdout.print(_plans_table(result, hw.memory_gib))
        best = result.ranked[0]
        e = best.estimate
        verdict = "meets the targets" if e["meets_targets"] else f"misses: {e.get('misses', '')}"
        stdout.print(f"Best: {best.plan.layout()} ({best.plan.as_string()}): {e['output_tokens_per_s']:,.0f} output "
                     f"tokens/s ({e['output_tokens_per_s_per_gpu']:,.0f} per GPU), TTFT {e['ttft_ms']:,.0f} ms, TPOT "
                     f"{e['tpot_ms']:,.1f} ms; {verdict}.", highlight=False, soft_wrap=True)
    rejected = ", ".join(f"{k}: {v:,}" for k, v in sorted(result.rejected.items(), key=lambda kv: -kv[1]))
    stdout.print(f"[dim]exact: {result.evaluations:,} plans evaluated of a space of {result.space_size:,} in "
                 f"{result.elapsed_s:.2f} s; {result.feasible:,} fit, {result.meeting:,} meet the targets. "
                 f"Rejected: {rejected or 'none'}.[/]", highlight=False, soft_wrap=True)
    stdout.print("[dim]Estimates come from an analytic serving model; see `autotune validate` on serving runs for "
                 "its measured error.[/]")
    if not result.ranked:
        stderr.print("[bold red]no serving plan fits.[/] Try more GPUs, a lower weight precision (fp8, int4) or a "
                     "shorter --input-len/--output-len.", soft_wrap=True)
        return 1
    return 0


def _plans_table(result, capacity_gib: float) -> Table:
    table = Table(title=f"Top {len(result.ranked)} serving plans", header_style="bold")
    for name in ("#", "layout", "weights/kv", "max batch", "out tok/s", "tok/s/GPU", "tok/s/user", "TTFT ms",
                 "TPOT ms", "fit batch", "GiB/GPU", "targets"):
        table.add_column(name, justify="left" if name in ("layout", "weights/kv", "targets") else "right", no_wrap=True)
    for r in result.ranked:
        p, e = r.plan, r.estimate
        table.add_row(str(r.rank), p.layout(), f"{p.weights}/{p.kv}", str(p.max_batch),
                      f"{e['output_tokens_per_s']:,.0f}", f"{e['output_tokens_per_s_per_gpu']:,.0f}",
                      f"{e['tokens_per_s_per_user']:,.1f}", _ms(e["ttft_ms"]), _ms(e["tpot_ms"], 1),
                      str(e["max_batch_fit"]), f"{e['memory_gib_per_gpu']:.1f}",
                      "met" if e["meets_targets"] else "miss: " + e.get("misses", ""))
    return table


def _ms(value, digits: int = 0) -> str:
    return "inf" if value is None else f"{value:,.{digits}f}"


def predict_serve(*, model: str, hardware: str, gpus: str | None, gpus_per_node: int | None, nodes: int | None,
                  workload: ServeWorkload, plan: str, json_out: bool, price: float | None, stdout) -> None:
    from ..serving.estimate import estimate_serving
    from ..serving.calibrated import params_for_gpu
    from ..serving.space import REASONS, rejection_reasons

    spec = load_model(model)
    hw = _hardware(hardware, price)
    bounds = parse_gpus(gpus)
    if bounds is not None and bounds[0] != bounds[1]:
        raise InputError("predict takes one GPU count; a range is for `search --workload serve --request-rate`",
                         field="--gpus")
    cluster = cluster_from_options(hw, bounds[0] if bounds else None, gpus_per_node, nodes)
    try:
        chosen = serve_plan_from_fields(parse_serve_fields(plan), cluster.n_gpus)
    except ValueError as exc:
        raise InputError(f"{exc}", field="--plan") from None
    params, note = params_for_gpu(hw.name)
    batch = ServePlanBatch.from_plans([chosen])
    reason = int(rejection_reasons(spec, cluster, batch)[0])
    estimate = estimate_serving(spec, cluster, workload, batch, params).row(0)
    if reason:
        estimate["fits"] = False
        estimate["meets_targets"] = False
        estimate["infeasible_reason"] = REASONS[reason]
    if json_out:
        print(json.dumps({"plan": chosen.as_dict(), "estimate": estimate}))
        return
    e = estimate
    stdout.print(f"[bold]{spec.name}[/] on {cluster.n_gpus} x {hw.name}: {chosen.layout()} ({chosen.as_string()})",
                 highlight=False)
    stdout.print(f"[dim]{note}[/]", highlight=False)
    mem = e["memory_breakdown_gib"]
    stdout.print(f"{e['output_tokens_per_s']:,.0f} output tokens/s ({e['output_tokens_per_s_per_gpu']:,.0f} per GPU, "
                 f"{e['tokens_per_s_per_user']:,.1f} per user); TTFT {_ms(e['ttft_ms'])} ms, TPOT {_ms(e['tpot_ms'], 1)} ms; "
                 f"batch {e['batch']:.1f} per replica (KV cache fits {e['max_batch_fit']}); memory "
                 f"{e['memory_gib_per_gpu']:.1f} of {hw.memory_gib:g} GiB per GPU (weights {mem['weights']:.1f}, "
                 f"KV {mem['kv_cache']:.1f}, reserve {mem['reserve']:.1f}).", highlight=False, soft_wrap=True)
    if not e["fits"]:
        stdout.print(f"[bold red]does not fit[/]: {e.get('infeasible_reason')}", highlight=False)
    elif e.get("misses"):
        stdout.print(f"[bold yellow]misses[/]: {e['misses']}", highlight=False)


# --- validation ----------------------------------------------------------------------------

def csv_columns(path: Path) -> list[str]:
    try:
        with open(path, newline="") as handle:
            return next(csv.reader(handle), [])
    except FileNotFoundError:
        raise InputError("file not found; check the path", source=str(path)) from None


def serving_report(path: Path):
    from ..inputs.hardware import hardware_names
    from ..serving.runs import read_serving_runs
    from ..serving.validation import validate_serving

    profiles = {n: load_hardware(n) for n in hardware_names()}
    parsed = read_serving_runs(path, set(profiles), {n for n, h in profiles.items() if h.supports("fp8")})
    with open(path, newline="") as handle:
        datasets = {row["id"]: row.get("dataset", "") for row in csv.DictReader(handle)}
    return validate_serving(parsed, profiles.__getitem__, datasets)


def validate_serving_csv(path: Path, *, json_out: bool, worst: int, stdout, stderr) -> None:
    report = serving_report(path)
    if json_out:
        print(json.dumps(report.to_json()))
        return
    if not report.rows:
        raise InputError("no usable serving rows to compare; see the skipped reasons with --json", source=str(path))
    rows = sorted(report.rows, key=lambda r: -abs(r.error_pct if r.error_pct is not None else (r.ttft_error_pct or 0)))
    table = Table(title=f"{len(report.rows)} serving runs, worst first", header_style="bold")
    for col in ("id", "source group", "kind", "measured tok/s/GPU", "predicted", "error", "batch (pred)",
                "TTFT meas/pred ms", "ITL meas/pred ms"):
        table.add_column(col, justify="left" if col in ("id", "source group", "kind") else "right")
    for r in rows[: worst or None]:
        rng = f" ({r.predicted_range[0]:,.0f}-{r.predicted_range[1]:,.0f}, kv unknown)" if r.predicted_range else ""
        table.add_row(
            r.id, r.source_group, r.kind,
            "-" if r.measured_tokens_per_s_per_gpu is None else f"{r.measured_tokens_per_s_per_gpu:,.1f}",
            "-" if r.predicted_tokens_per_s_per_gpu is None else f"{r.predicted_tokens_per_s_per_gpu:,.1f}{rng}",
            "-" if r.error_pct is None else f"{r.error_pct:+.1f}%",
            "-" if r.predicted_batch is None else f"{r.predicted_batch:,.0f}",
            "-" if r.measured_ttft_ms is None else f"{r.measured_ttft_ms:,.1f}/{r.predicted_ttft_ms or float('nan'):,.1f}",
            "-" if r.measured_itl_ms is None else f"{r.measured_itl_ms:,.1f}/{r.predicted_itl_ms or float('nan'):,.1f}",
        )
    stdout.print(table)
    groups = Table(title="Serving error by source group and kind (MAPE)", header_style="bold")
    for col in ("source group", "kind", "rows", "tok/s/GPU", "TTFT", "ITL"):
        groups.add_column(col, justify="left" if col in ("source group", "kind") else "right")
    keys = sorted(set(report.throughput) | set(report.ttft) | set(report.itl))
    for key in keys:
        cells = []
        for table_ in (report.throughput, report.ttft, report.itl):
            s = table_.get(key)
            cells.append("-" if s is None else f"{s.mape_pct:.1f}% ({s.n})")
        n = max((t[key].n for t in (report.throughput, report.ttft, report.itl) if key in t), default=0)
        groups.add_row(key[0], key[1], str(n), *cells)
    stdout.print(groups)
    stdout.print(f"{len(report.rows)} rows compared, {len(report.skipped)} skipped. Max-throughput rows: the batch is "
                 "predicted (KV-cache bound), not read. Rows that leave the KV dtype unstated are predicted as the "
                 "mean over the dtypes the GPU supports (range shown).", highlight=False, soft_wrap=True)
    for skipped in report.skipped:
        stderr.print(f"[dim]skipped {skipped.id}: {skipped.reason}[/]", highlight=False, soft_wrap=True)


def require_training(seq_len: int | None, global_batch: int | None) -> None:
    """Training needs --seq-len and --global-batch (they became optional so serving can leave them out)."""
    if seq_len is None:
        raise InputError("training needs the sequence length: --seq-len TOKENS (or --workload serve)", field="--seq-len")
    if global_batch is None:
        raise InputError("training needs the global batch: --global-batch SEQUENCES (or --workload serve)",
                         field="--global-batch")


def single_gpu_count(gpus: str | None) -> int | None:
    bounds = parse_gpus(gpus)
    if bounds is None:
        return None
    if bounds[0] != bounds[1]:
        raise InputError("predict takes one GPU count, e.g. --gpus 64", field="--gpus")
    return bounds[0]


# --- launch commands -------------------------------------------------------------------------

SERVING_FORMATS = ("vllm", "sglang")


def serving_files(format: str, plan, model, hardware: str, max_model_len: int, estimate=None,
                  model_path: str | None = None) -> dict[str, str]:
    from ..outputs.emit import SERVING_EMITTERS
    from ..outputs.emit.vllm import ServeContext

    if max_model_len < 1:
        raise InputError(f"must be >= 1, but got {max_model_len}", field="--seq-len")
    ctx = ServeContext(plan=plan, model=model, hardware=hardware, max_model_len=max_model_len, model_path=model_path,
                       estimate=estimate)
    return SERVING_EMITTERS[format](ctx)


def emit_serving(format, plan_source, plan_text, rank, model, hardware, gpus, seq_len, out, force, json_out) -> None:
    """``autotune emit --format vllm|sglang``: from a serving plans.json, or a plan string with
    --model, --hardware, --gpus and --seq-len (the longest sequence: prompt + output)."""
    from . import app as cli
    from .emit import _read_plans, write_files

    if plan_source is not None and plan_text is not None:
        raise InputError("give the plan once: as PLAN or as --plan", field="--plan")
    source = plan_source or plan_text
    if source is None:
        raise InputError("give a serving plans.json (search --workload serve --out DIR) or a plan string such as "
                         "tp=4,weights=fp8,kv=fp8,max_batch=64", field="PLAN")
    loaded = _read_plans(source) if plan_text is None else None
    estimate = None
    if loaded is not None:
        document, where = loaded
        inputs = document.get("inputs") or {}
        if inputs.get("workload") != "serve":
            raise InputError("is not a serving plans.json (inputs.workload is not serve); rerun "
                             "`autotune search --workload serve --out DIR`", source=where)
        entries = {e.get("rank"): e for e in document.get("plans", [])}
        if rank not in entries:
            raise InputError(f"has no plan of rank {rank}", source=where, field="--rank")
        spec = load_model(model or inputs["model"])
        try:
            chosen = serve_plan_from_fields(entries[rank]["plan"], int(inputs["gpus"]))
        except (KeyError, ValueError) as exc:
            raise InputError(f"plan of rank {rank} is malformed: {exc}", source=where, field="plans.plan") from None
        hw_name = str(inputs["hardware"])
        max_len = int(inputs["input_len"]) + int(inputs["output_len"])
        estimate = entries[rank].get("estimate")
    else:
        if model is None or hardware is None or gpus is None or seq_len is None:
            raise InputError("a plan string needs --model, --hardware, --gpus and --seq-len (prompt + output tokens)",
                             field="--plan")
        spec = load_model(model)
        hw_name = load_hardware(hardware).name
        try:
            chosen = serve_plan_from_fields(parse_serve_fields(source), int(gpus))
        except ValueError as exc:
            raise InputError(str(exc), field="--plan") from None
        max_len = seq_len
    files = serving_files(format, chosen, spec, hw_name, max_len, estimate)
    if out is not None:
        written = write_files(out, files, force)
        if json_out:
            print(json.dumps({"format": format, "written": [str(p) for p in written]}))
        else:
            cli.stdout.print("Wrote " + ", ".join(str(p) for p in written), highlight=False, soft_wrap=True)
    elif json_out:
        print(json.dumps({"format": format, "files": files}))
    else:
        for name, text in files.items():
            print(f"# ===== {name} =====")
            print(text, end="")
