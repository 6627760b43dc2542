"""``autotune explain``, ``autotune report`` and capacity planning for ``autotune search``.

``register(app)`` adds the two commands; ``capacity_search`` is what ``autotune search``
calls when ``--gpus`` is a range (64..4096), ``--hardware`` names several profiles or
``--deadline`` is given.  Effects (flags, printing, files) live here; the work is in
``autotune/explain.py``, ``autotune/capacity.py`` and ``autotune/report/``.
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from . import capacity as cap
from . import output
from .errors import InputError
from .inputs import SearchSettings, TrainingRequest

# --- explain --------------------------------------------------------------------------------


def _load_ranked(path: Path, rank: int) -> tuple[dict, dict]:
    from .report.data import load_plans_json

    doc = load_plans_json(path)
    if not 1 <= rank <= len(doc["plans"]):
        raise InputError(f"must be between 1 and {len(doc['plans'])} (the plans in {path}), but got {rank}",
                         field="--rank")
    return doc.get("inputs") or {}, doc["plans"][rank - 1]["plan"]


def explain_command(
    plans: Annotated[Path | None, typer.Argument(help="A plans.json from `autotune search --out DIR`.")] = None,
    rank: Annotated[int, typer.Option("--rank", "-r", help="Which plan of PLANS to explain (1 = best).")] = 1,
    plan: Annotated[str | None, typer.Option("--plan", "-p", help="A plan as key=value pairs (instead of PLANS).")] = None,
    model: Annotated[str | None, typer.Option("--model", "-m", help="Model (with --plan; overrides PLANS' inputs).")] = None,
    hardware: Annotated[str | None, typer.Option("--hardware", "-H", help="Hardware profile (with --plan).")] = None,
    gpus: Annotated[int | None, typer.Option("--gpus", "-n", help="Number of GPUs (with --plan).")] = None,
    gpus_per_node: Annotated[int | None, typer.Option("--gpus-per-node", help="GPUs per node [default: the profile's].")] = None,
    seq_len: Annotated[int | None, typer.Option("--seq-len", "-s", help="Sequence length (with --plan).")] = None,
    global_batch: Annotated[int | None, typer.Option("--global-batch", "-b", help="Global batch in sequences (with --plan).")] = None,
    calibration: Annotated[str | None, typer.Option("--calibration", help="Calibration overlay YAML.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout (nothing else).")] = False,
) -> None:
    """Explain one plan: time and memory breakdown, what binds, and what each one-step change does."""
    from .cli import stdout, user_errors
    from .explain import explain
    from .inputs import TrainingRequest
    from .plan import parse_plan, plan_from_fields

    with user_errors():
        if (plans is None) == (plan is None):
            raise InputError("give a plans.json (with --rank K) or --plan with --model, --hardware, --gpus, "
                             "--seq-len and --global-batch", field="PLANS")
        inputs: dict[str, Any] = {}
        fields = None
        if plans is not None:
            inputs, fields = _load_ranked(plans, rank)
        given = {"model": model, "hardware": hardware, "gpus": gpus, "seq_len": seq_len, "global_batch": global_batch}
        merged = {**{k: inputs.get(k) for k in given}, **{k: v for k, v in given.items() if v is not None}}
        missing = [k for k, v in merged.items() if v is None]
        if missing:
            raise InputError(f"missing {', '.join('--' + m.replace('_', '-') for m in missing)}", field="--plan")
        t = TrainingRequest(model=merged["model"], hardware=merged["hardware"], gpus=int(merged["gpus"]),
                            gpus_per_node=gpus_per_node or inputs.get("gpus_per_node"), seq_len=int(merged["seq_len"]),
                            global_batch=int(merged["global_batch"]), price=inputs.get("price_usd_per_gpu_hour"),
                            calibration=calibration, framework=inputs.get("framework")).build()
        try:
            chosen = parse_plan(plan, t.cluster.n_gpus) if plan is not None else plan_from_fields(fields, t.cluster.n_gpus)
        except ValueError as exc:
            raise InputError(str(exc), field="--plan") from None
        found = explain(t.model, t.cluster, t.workload, chosen, framework=t.framework)
        if json_out:
            print(json.dumps(found.to_json()))
            return
        hw = t.cluster.hardware
        stdout.print(f"[bold]{t.model.name}[/] on {t.cluster.n_gpus} x {hw.name}: {chosen.layout()} with "
                     f"{output.settings_text(chosen)}", highlight=False)
        times, memory = output.breakdown_tables(found.estimate, hw.memory_gib)
        stdout.print(times)
        stdout.print(memory)
        stdout.print(f"[bold]What binds:[/] {found.binding}.", highlight=False, soft_wrap=True)
        stdout.print(sensitivity_table(found))


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
            verdict = f"[red]does not fit[/] ({row.memory_gib - found.capacity_gib:+.1f} GiB over)"
        else:
            verdict = "[green]fits[/]"
        table.add_row(row.change, f"{row.step_time_s:.2f}", f"{row.step_time_change:+.1%}", f"{row.memory_gib:.1f}",
                      f"{row.memory_change_gib:+.1f}", verdict)
    return table


# --- report ---------------------------------------------------------------------------------


def report_command(
    result: Annotated[Path | None, typer.Argument(help="A plans.json from `autotune search --out DIR`.")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for report.html and the PNG figures.")] = Path("report"),
    trials: Annotated[int, typer.Option("--trials", help="Evaluations for the TPE / random convergence runs (0: skip). "
                                        "With --study: random search runs at the study's own budget; 0 skips it.")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the convergence runs and samples.")] = 0,
    storage: Annotated[str | None, typer.Option("--storage", help="Optuna storage URL of a stored study (instead of RESULT).")] = None,
    study: Annotated[str | None, typer.Option("--study", help="Study name in --storage.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --out to be a non-empty folder.")] = False,
) -> None:
    """Write an HTML report (self-contained, works offline) and its figures as PNG files."""
    from .cli import _progress, stdout, user_errors
    from .report import StudySource, build_report, require_matplotlib

    with user_errors():
        source: Path | StudySource
        if storage or study:
            if result is not None:
                raise InputError("give a plans.json or a stored study (--storage with --study), not both",
                                 field="--storage")
            if not storage:
                raise InputError("--study needs the storage it lives in, e.g. --storage sqlite:///study.db (the "
                                 "--storage given to `autotune search` or `autotune tune`)", field="--storage")
            if not study:
                raise InputError("--storage needs the study's name: --study NAME (the --study given to "
                                 "`autotune search` or `autotune tune`)", field="--study")
            source = StudySource(storage, study)
        elif result is None:
            raise InputError("give a plans.json from `autotune search --out DIR`, or a stored study with "
                             "--storage URL --study NAME", field="RESULT")
        else:
            source = result
        if trials < 0:
            raise InputError(f"must be >= 0, but got {trials}", field="--trials")
        require_matplotlib()
        if out.exists() and not out.is_dir():
            raise InputError("exists and is not a folder; choose another --out", source=str(out))
        if out.is_dir() and any(out.iterdir()) and not force:
            raise InputError("folder is not empty; choose another --out, or pass --force to overwrite", source=str(out))
        with _progress() as bar:
            task = bar.add_task("report", total=None)

            def progress(name: str, done: int, total: int) -> None:
                bar.update(task, description=f"report ({name})", completed=done, total=total)

            files = build_report(source, out, trials=trials, seed=seed, progress=progress)
        stdout.print(f"Wrote {files.html} and {len(files.pngs)} figures: " + ", ".join(p.name for p in files.pngs),
                     highlight=False, soft_wrap=True)


# --- capacity planning (called by `autotune search`) ----------------------------------------


def wants_capacity(gpu_range: tuple[int, int] | None, hardware: str, deadline: str | None) -> bool:
    return gpu_range is not None or "," in hardware or deadline is not None


def capacity_search(request: TrainingRequest, settings: SearchSettings, *, gpu_range: tuple[int, int] | None,
                    deadline: str | None, pue: float | None, grid_intensity: float | None, emit: str | None,
                    json_out: bool, out: Path | None, force: bool) -> None:
    """Search every (hardware, GPU count) pair; print the cheapest plan in time and the fastest.

    ``request.hardware`` may list several profiles (comma-separated) and ``request.gpus`` is the one GPU count
    when ``gpu_range`` is None.
    """
    from .cli import _inputs_json, _progress, stderr, stdout
    from .hardware import load_hardware
    from .search import TrainingProblem, parse_objectives, run_search
    from .space import load_space

    model, tokens, gpus_per_node = request.model, request.tokens, request.gpus_per_node
    space = settings.space
    names = cap.split_hardware(request.hardware)
    if emit:
        raise InputError("launch configs are written for one cluster: run the search again with the chosen --gpus "
                         "and --hardware, and --emit", field="--emit")
    if tokens is None:
        raise InputError("capacity planning needs the training budget, e.g. --tokens 1.5e12", field="--tokens")
    if request.nodes is not None:
        raise InputError("give the range of cluster sizes with --gpus LOW..HIGH, not --nodes", field="--nodes")
    if gpu_range is None and request.gpus is None:
        raise InputError("give a GPU count or a range, e.g. --gpus 64..2048", field="--gpus")
    deadline_days = cap.parse_duration_days(deadline)
    pue_value, grid = cap.check_pue(pue), cap.check_grid_intensity(grid_intensity)
    objectives = parse_objectives(settings.objective, tokens=tokens)
    if len(objectives) > 1:
        raise InputError("capacity planning ranks by one objective (cost, time, throughput or memory); "
                         "drop the comma-separated list", field="--objective")
    search_space = load_space(space).with_precisions(settings.precisions).fixed(settings.fixes)
    if out is not None:
        output.prepare_out_dir(out, force)
    hw_cache = {}

    def node_size(name: str) -> int:
        hw_cache.setdefault(name, load_hardware(name))
        return gpus_per_node or hw_cache[name].gpus_per_node

    def build(name: str, n: int):
        return dataclasses.replace(request, hardware=name, gpus=n).build()

    def search_one(inputs):
        problem = TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload, search_space, inputs.framework,
                                        memory_headroom=settings.memory_headroom)
        return run_search(problem, objectives, sampler=settings.sampler, trials=settings.trials, seed=settings.seed,
                          top=settings.top)

    with _progress() as bar:
        task = bar.add_task("capacity", total=None)

        def progress(name: str, done: int, total: int) -> None:
            bar.update(task, description=f"capacity ({name})", completed=done, total=total)

        goal = cap.CapacityGoal(tokens=tokens, objective=objectives[0].name, deadline_days=deadline_days,
                                pue=pue_value, grid=grid)
        found, results = cap.plan_capacity(names, gpu_range, request.gpus, goal, node_size=node_size, build=build,
                                           search_one=search_one, progress=progress)
    chosen = found.chosen
    if chosen is not None:
        inputs, result = results[(chosen.hardware, chosen.gpus)]
        hw = inputs.cluster.hardware
        def with_footprint(estimate: dict) -> dict:
            est = output.add_training_totals(estimate, inputs.cluster.n_gpus, tokens, hw.price_usd_per_gpu_hour,
                                             inputs.workload.tokens_per_step)
            return {**est, **cap.footprint(inputs.cluster.n_gpus, est["training_days"], hw.average_power_w,
                                           hw.price_usd_per_gpu_hour, pue_value, grid)}

        result = dataclasses.replace(
            result, ranked=[dataclasses.replace(r, estimate=with_footprint(r.estimate)) for r in result.ranked])
        document = result.to_json()
        document["inputs"] = _inputs_json(inputs, space)
    else:
        document = {"plans": [], "search": {}, "inputs": {}}
    document["capacity"] = found.to_json()
    if out is not None:
        written = output.write_plans(out, document)
    if json_out:
        print(json.dumps(document))
    else:
        _print_capacity(found, stdout, names, request.seq_len, request.global_batch, tokens, model)
        if out is not None:
            stdout.print("Wrote " + ", ".join(str(p) for p in written))
    if chosen is None:
        fastest = found.fastest
        why = (f"the fastest, {fastest.gpus} x {fastest.hardware}, takes {fastest.totals['training_days']:,.1f} days"
               if fastest else "no plan fits on any of them")
        stderr.print(f"[bold red]no plan meets the deadline.[/] {why}; widen --gpus or move --deadline.",
                     soft_wrap=True)
        raise typer.Exit(code=1)


def _describe(c: cap.Candidate) -> str:
    from .plan import plan_from_fields

    plan = plan_from_fields(c.plan, c.gpus)
    t = c.totals
    return (f"{c.gpus:,} x {c.hardware} ({max(1, c.gpus // c.gpus_per_node):,} nodes), {plan.layout()} "
            f"{output.settings_short(plan)}: {t['training_days']:,.1f} days, {t['gpu_hours']:,.0f} GPU-hours, "
            f"${t['cost_usd']:,.0f}, {t['energy_mwh']:,.0f} MWh, {t['co2e_t']:,.0f} t CO2e")


def _print_capacity(found: cap.CapacityResult, stdout, names, seq_len, global_batch, tokens, model) -> None:
    from .plan import plan_from_fields

    deadline = f", deadline {found.deadline_days:g} days" if found.deadline_days else ""
    stdout.print(f"[bold]{model}[/] on {', '.join(names)}: {tokens:.3g} tokens, sequence {seq_len}, global batch "
                 f"{global_batch}{deadline}", highlight=False)
    table = Table(title="Best plan per hardware and GPU count", header_style="bold")
    for name, justify in (("hardware", "left"), ("GPUs", "right"), ("layout", "left"), ("tok/s/GPU", "right"),
                          ("days", "right"), ("GPU-hours", "right"), ("cost $", "right"), ("MWh", "right"),
                          ("t CO2e", "right"), ("", "left")):
        table.add_column(name, justify=justify, no_wrap=True)
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
    stdout.print(table)
    what = {"cost": "Cheapest in time", "memory": "Leanest in time"}.get(found.objective, "Fastest in time")
    if found.chosen:
        stdout.print(f"[bold]{what}:[/] {_describe(found.chosen)}.", highlight=False, soft_wrap=True)
    if found.cheapest and found.cheapest is not found.chosen:
        stdout.print(f"Cheapest in time: {_describe(found.cheapest)}.", highlight=False, soft_wrap=True)
    if found.fastest and found.fastest is not found.chosen:
        stdout.print(f"Fastest: {_describe(found.fastest)}.", highlight=False, soft_wrap=True)
    stdout.print(f"[dim]Energy = GPUs x average board power x hours x PUE {found.pue:g} ({cap.PUE_SOURCE}); "
                 f"emissions at {found.grid_g_per_kwh:g} gCO2e/kWh ({cap.GRID_INTENSITY_SOURCE}). "
                 "Money at each profile's price per GPU-hour (--price overrides it for every profile).[/]",
                 highlight=False, soft_wrap=True)


def register(app: typer.Typer) -> None:
    app.command(
        "explain",
        epilog=("**Examples**\n\n    autotune explain runs/70b/plans.json --rank 2\n\n"
                "    autotune explain -m llama3-70b -H h100-sxm5-80gb --gpus 64 -s 8192 -b 512 "
                "--plan \"tp=8,pp=4,zero=1,mbs=1,recompute=selective\""),
    )(explain_command)
    app.command(
        "report",
        epilog=("**Examples**\n\n    autotune search -m llama3-70b -H h100-sxm5-80gb --gpus 64 -s 8192 -b 512 --out runs/70b\n\n"
                "    autotune report runs/70b/plans.json --out runs/70b/report\n\n"
                "Needs matplotlib: " + "pip install 'autotune[report]'."),
    )(report_command)


__all__ = ["capacity_search", "explain_command", "register", "report_command", "wants_capacity"]
