"""The ``autotune`` command line.  Effects live here: reading flags, printing, writing files.

One error path: bad input raises :class:`~autotune.errors.InputError` (or a
``ValueError`` from a validating constructor); :func:`user_errors` prints it as
one line and exits with status 2, without a traceback.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated, Iterator, Optional

import numpy as np
import typer
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from . import output
from .confidence import sentence as confidence_sentence, with_confidence
from .errors import InputError
from .hardware import hardware_names, load_hardware
from .inputs import SearchSettings, TrainingRequest
from .output import parse_precisions, search_header
from .search.problem import DEFAULT_MEMORY_HEADROOM
from .modelspec import load_model, model_names
from .plan import PLAN_DEFAULTS, PLAN_KEYS, PlanBatch, parse_plan, parse_plan_fields
from .space import PERMISSIVE_RULES, REASONS, load_space, rejection_reasons

app = typer.Typer(
    help="Plan parallel layouts for LLM training: ranked plans, step time, memory, MFU and cost.",
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode="markdown",
)
hardware_app = typer.Typer(help="Bundled hardware profiles.", no_args_is_help=True)
models_app = typer.Typer(help="Bundled model specs.", no_args_is_help=True)
app.add_typer(hardware_app, name="hardware")
app.add_typer(models_app, name="models")

# Piped output (CI logs, files) gets a fixed width wide enough for the plans table.
stdout = Console(width=None if sys.stdout.isatty() else 132)
stderr = Console(stderr=True)


@contextlib.contextmanager
def user_errors() -> Iterator[None]:
    try:
        yield
    except (InputError, ValueError) as exc:
        stderr.print(f"[bold red]error:[/] {escape(str(exc))}", highlight=False, soft_wrap=True)
        raise typer.Exit(code=2) from None


# --- shared options -----------------------------------------------------------------------
Model = Annotated[str, typer.Option("--model", "-m", help="Bundled model name (see `autotune models list`), a spec YAML, or an HF config.json.")]
HardwareOpt = Annotated[str, typer.Option("--hardware", "-H", help="Bundled hardware profile (see `autotune hardware list`) or a profile YAML.")]
Gpus = Annotated[Optional[int], typer.Option("--gpus", "-n", help="Number of GPUs.")]
GpusPerNode = Annotated[Optional[int], typer.Option("--gpus-per-node", help="GPUs per node [default: the profile's].")]
Nodes = Annotated[Optional[int], typer.Option("--nodes", help="Number of nodes (instead of --gpus).")]
SeqLen = Annotated[int, typer.Option("--seq-len", "-s", help="Sequence length in tokens.")]
GlobalBatch = Annotated[int, typer.Option("--global-batch", "-b", help="Global batch in sequences.")]
Tokens = Annotated[Optional[float], typer.Option("--tokens", help="Training budget in tokens (e.g. 15e12): adds total time, GPU-hours and cost.")]
Price = Annotated[Optional[float], typer.Option("--price", help="USD per GPU-hour [default: the profile's].")]
Calibration = Annotated[Optional[str], typer.Option("--calibration", help="Calibration overlay YAML from `autotune calibrate`.")]
FrameworkOpt = Annotated[Optional[str], typer.Option("--framework", help="Training software NAME[@VERSION] (e.g. megatron-lm@2024-07, torchtitan, nemo@24.07; `profiles/frameworks/`); version = release or YYYY-MM [default: the --emit target, else megatron-lm, newest profiled].")]
JsonOut = Annotated[bool, typer.Option("--json", help="Print machine-readable JSON on stdout (nothing else).")]


# Serving options, shared by search and predict.
WorkloadKind = Annotated[str, typer.Option("--workload", help="train | serve. serve: inference plans (tp, pp, replicas, quantization, batch limit) under latency targets.")]
InputLen = Annotated[Optional[int], typer.Option("--input-len", help="Serving: prompt tokens per request.")]
OutputLen = Annotated[Optional[int], typer.Option("--output-len", help="Serving: output tokens per request.")]
TtftMs = Annotated[Optional[float], typer.Option("--ttft-ms", help="Serving: time-to-first-token target, ms.")]
TpotMs = Annotated[Optional[float], typer.Option("--tpot-ms", help="Serving: time-per-output-token target, ms.")]
Concurrency = Annotated[Optional[int], typer.Option("--concurrency", help="Serving: concurrent users over the deployment.")]
RequestRate = Annotated[Optional[float], typer.Option("--request-rate", help="Serving: requests per second (with a --gpus range: find the fewest GPUs).")]


def _progress() -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
        console=stderr, transient=True,
    )


def _note_inputs(inputs) -> None:
    """Say what is unusual about the inputs, without refusing them."""
    limit = inputs.model.max_seq_len
    if limit and inputs.workload.seq_len > limit:
        stderr.print(f"[yellow]note:[/] --seq-len {inputs.workload.seq_len:,} exceeds {inputs.model.name}'s context "
                     f"window of {limit:,} tokens; the plan assumes a long-context extension.", highlight=False)


def _reject_flags(given: dict, context: str) -> None:
    """Refuse flags that do not apply, rather than ignore them silently."""
    used = [flag for flag, value in given.items() if value is not None]
    if used:
        raise InputError(f"{', '.join(used)} do{'es' if len(used) == 1 else ''} not apply to {context}; leave "
                         f"{'it' if len(used) == 1 else 'them'} out", field=used[0])


def _parse_fixes(fixes: list[str]) -> dict:
    out: dict = {}
    for item in fixes:
        try:
            fields = parse_plan_fields(item)
        except ValueError as exc:
            raise InputError(f"{exc} (use e.g. --fix tp=8)", field="--fix") from None
        if "dp" in fields:
            raise InputError("dp is derived from the GPU count; fix tp, pp and cp instead", field="--fix")
        out.update(fields)
    return out


@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune search -m llama3-70b -H h100-sxm5-80gb --gpus 64 --seq-len 8192 --global-batch 512\n\n"
        "    autotune search -m gpt3-175b -H a100-sxm4-80gb --gpus 1024 -s 2048 -b 1536 --sampler tpe --trials 200\n\n"
        "    autotune search -m llama3-8b -H h100-sxm5-80gb --gpus 8 -s 8192 -b 64 --fix tp=1 --objective throughput,memory\n\n"
        "    autotune search -m llama3-70b -H h100-sxm5-80gb --nodes 8 -s 8192 -b 512 --tokens 2e12 --out runs/70b"
    )
)
def search(
    model: Model,
    hardware: HardwareOpt,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Sequence length in tokens (training).")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-b", help="Global batch in sequences (training).")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", "-n", help="Number of GPUs, or a range LOW..HIGH (64..4096) to plan capacity: searches whole-node counts in it.")] = None,
    gpus_per_node: GpusPerNode = None,
    nodes: Nodes = None,
    tokens: Tokens = None,
    price: Price = None,
    space: Annotated[Optional[str], typer.Option("--space", help="Search-space YAML [default: the bundled train.yaml].")] = None,
    fix: Annotated[Optional[list[str]], typer.Option("--fix", help="Pin an axis, repeatable: --fix tp=8 --fix recompute=full.")] = None,
    sampler: Annotated[str, typer.Option("--sampler", help="auto | exact | tpe | gp | random. auto: exact when cheap, else TPE.")] = "auto",
    trials: Annotated[int, typer.Option("--trials", help="Trials for tpe / gp / random.")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Sampler seed: the same seed gives the same answer.")] = 0,
    objective: Annotated[str, typer.Option("--objective", help="throughput | cost | time | memory; comma-separated for a Pareto set.")] = "throughput",
    top: Annotated[int, typer.Option("--top", "-k", help="How many plans to show and write.")] = 10,
    json_out: JsonOut = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write plans.json and plans.csv into this folder.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --out to be a non-empty folder.")] = False,
    calibration: Calibration = None,
    emit: Annotated[Optional[str], typer.Option("--emit", help="Also write launch configs for the winner into --out: megatron, deepspeed, torchtitan, slurm (comma-separated); the search keeps to plans they can express.")] = None,
    deadline: Annotated[Optional[str], typer.Option("--deadline", help="Capacity planning: finish --tokens within this time, e.g. 30d, 720h.")] = None,
    pue: Annotated[Optional[float], typer.Option("--pue", help="Data-centre PUE for energy [default: 1.58, Uptime Institute 2023 average].")] = None,
    grid_intensity: Annotated[Optional[float], typer.Option("--grid-intensity", help="gCO2e per kWh for emissions [default: 475, world average (IEA 2019)].")] = None,
    storage: Annotated[Optional[str], typer.Option("--storage", help="Keep the trials in an Optuna storage (sqlite:///s.db, postgresql://..., journal:./s.log); a re-run continues up to --trials, `autotune worker` joins. See docs/distributed.md.")] = None,
    study: Annotated[Optional[str], typer.Option("--study", help="Study name in --storage.")] = None,
    new: Annotated[bool, typer.Option("--new", help="Replace an existing study of that name (e.g. after changing the model or space).")] = False,
    heartbeat: Annotated[int, typer.Option("--heartbeat", help="With --storage (SQLite/PostgreSQL): seconds between trial heartbeats; stale trials are retried. 0: off.")] = 30,
    workload: WorkloadKind = "train",
    input_len: InputLen = None,
    output_len: OutputLen = None,
    ttft_ms: TtftMs = None,
    tpot_ms: TpotMs = None,
    concurrency: Concurrency = None,
    request_rate: RequestRate = None,
    framework: FrameworkOpt = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="GEMM precisions to search, comma-separated: bf16 (default), bf16,fp8 or fp8. fp8 is never searched unless named.")] = None,
    memory_headroom: Annotated[Optional[float], typer.Option("--memory-headroom", help="Fraction of HBM ranked plans must leave free [default: 0.03, i.e. plans use at most 97% of the GPU's memory].")] = None,
) -> None:
    """Search parallel layouts and settings; print the best plans, ranked."""
    from .diagnose import diagnose
    from . import cli_report
    from .capacity import parse_gpus
    from .search import SAMPLER_CHOICES, TrainingProblem, parse_objectives, run_search

    with user_errors():
        if trials < 1:
            raise InputError(f"must be >= 1, but got {trials}", field="--trials")
        if top < 1:
            raise InputError(f"must be >= 1, but got {top}", field="--top")
        from . import cli_serve

        serving_flags = {"--input-len": input_len, "--output-len": output_len, "--ttft-ms": ttft_ms,
                         "--tpot-ms": tpot_ms, "--concurrency": concurrency, "--request-rate": request_rate}
        training_flags = {
            "--seq-len": seq_len, "--global-batch": global_batch, "--tokens": tokens, "--deadline": deadline,
            "--pue": pue, "--grid-intensity": grid_intensity, "--storage": storage, "--study": study,
            "--emit": emit, "--calibration": calibration, "--framework": framework, "--precision": precision,
            "--memory-headroom": memory_headroom,
            "--objective": None if objective == "throughput" else objective,
            "--sampler": None if sampler == "auto" else sampler,
        }
        if cli_serve.check_workload(workload) == "serve":
            _reject_flags(training_flags, "--workload serve")
            load = cli_serve.serve_workload(input_len, output_len, ttft_ms, tpot_ms, concurrency, request_rate)
            raise typer.Exit(code=cli_serve.search_serve(
                model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes, workload=load,
                space=space, fixes=fix or [], top=top, json_out=json_out, out=out, price=price, stdout=stdout, stderr=stderr))
        _reject_flags(serving_flags, "training (add --workload serve for serving)")
        cli_serve.require_training(seq_len, global_batch)
        gpu_count, gpu_range = parse_gpus(gpus)
        if framework is None and emit is not None:
            from .cli_emit import framework_for_formats, parse_formats

            framework = framework_for_formats(parse_formats(emit))
        headroom = DEFAULT_MEMORY_HEADROOM if memory_headroom is None else memory_headroom
        if not 0.0 <= headroom < 1.0:
            raise InputError(f"0 <= headroom < 1 must hold (a fraction of HBM), but got {headroom}",
                             field="--memory-headroom")
        precisions = parse_precisions(precision)
        request = TrainingRequest(model=model, hardware=hardware, gpus=gpu_count, gpus_per_node=gpus_per_node,
                                  nodes=nodes, seq_len=seq_len, global_batch=global_batch, tokens=tokens, price=price,
                                  calibration=calibration, framework=framework)
        if cli_report.wants_capacity(gpu_range, hardware, deadline):
            settings = SearchSettings(space=space, fixes=_parse_fixes(fix or []), sampler=sampler, trials=trials,
                                      seed=seed, objective=objective, top=top, precisions=precisions,
                                      memory_headroom=headroom)
            cli_report.capacity_search(request, settings, gpu_range=gpu_range, deadline=deadline, pue=pue,
                                       grid_intensity=grid_intensity, emit=emit, json_out=json_out, out=out,
                                       force=force)
            return
        inputs = request.build()
        _note_inputs(inputs)
        try:
            objectives = parse_objectives(objective, tokens=tokens)
        except ValueError as exc:
            raise InputError(str(exc), field="--objective") from None
        if sampler not in SAMPLER_CHOICES:
            raise InputError(f"must be one of {', '.join(SAMPLER_CHOICES)}, but got {sampler!r}", field="--sampler")
        fixes = _parse_fixes(fix or [])
        search_space = load_space(space).with_precisions(precisions).fixed(fixes)
        problem = TrainingProblem.build(inputs.model, inputs.cluster, inputs.workload, search_space, inputs.framework,
                                        memory_headroom=headroom)
        formats = None
        if emit is not None:
            from .cli_emit import check_formats, expressible_mask, parse_formats

            formats = parse_formats(emit)
            if out is None:
                raise InputError("needs --out DIR, the folder the launch configs are written to", field="--emit")
            check_formats(formats, inputs.model, inputs.workload)
            problem = dataclasses.replace(problem, express=lambda plans: np.logical_and.reduce(
                [expressible_mask(f, plans, inputs.model, inputs.workload) for f in formats]))
        # Every input is checked before anything is written.
        if out is not None:
            output.prepare_out_dir(out, force)
        with _progress() as bar:
            task = bar.add_task("searching", total=None)

            def progress(name: str, done: int, total: int) -> None:
                bar.update(task, description=f"searching ({name})", completed=done, total=total)

            result = run_search(problem, objectives, sampler=sampler, trials=trials, seed=seed, top=top, progress=progress,
                                storage=storage, study=study, new=new, heartbeat_s=heartbeat or None)
        hw = inputs.cluster.hardware
        result = dataclasses.replace(result, ranked=[
            dataclasses.replace(ranked, estimate=with_confidence(output.add_training_totals(
                ranked.estimate, inputs.cluster.n_gpus, tokens, hw.price_usd_per_gpu_hour, inputs.workload.tokens_per_step),
                ranked.plan, hw.name))
            for ranked in result.ranked
        ])
        document = result.to_json()
        document["inputs"] = _inputs_json(inputs, space, problem)
        if out is not None:
            written = output.write_plans(out, document)
            if formats and result.ranked:
                from .cli_emit import emit_for_search

                best = result.ranked[0]
                written += emit_for_search(formats, best.plan, inputs.model, inputs.cluster, inputs.workload,
                                           best.estimate, out, force)
        if json_out:
            print(json.dumps(document))
        else:
            _print_search(result, inputs, problem)
            if out is not None:
                stdout.print("Wrote " + ", ".join(str(p) for p in written))
        if not result.ranked:
            found = diagnose(problem, result.rejected)
            stderr.print(f"[bold red]no plan fits.[/] What binds: {found.binding}.", soft_wrap=True)
            for fix_text in found.fixes:
                stderr.print(f"  - {fix_text}", soft_wrap=True)
            raise typer.Exit(code=1)


def _inputs_json(inputs, space: str | None, problem=None) -> dict:
    extra = {}
    if problem is not None:
        extra = {"precisions": list(problem.choices["precision"]), "memory_headroom": problem.memory_headroom}
    return {
        "framework": inputs.framework.label if inputs.framework.version else inputs.framework.name,
        **extra,
        "model": inputs.model.name,
        "hardware": inputs.cluster.hardware.name,
        "gpus": inputs.cluster.n_gpus,
        "gpus_per_node": inputs.cluster.gpus_per_node,
        "seq_len": inputs.workload.seq_len,
        "global_batch": inputs.workload.global_batch,
        "tokens": inputs.workload.tokens,
        "price_usd_per_gpu_hour": inputs.cluster.hardware.price_usd_per_gpu_hour,
        "space": space or "search_spaces/train.yaml",
    }


def _print_search(result, inputs, problem) -> None:
    hw = inputs.cluster.hardware
    stdout.print(
        f"[bold]{inputs.model.name}[/] on {inputs.cluster.n_gpus} x {hw.name} ({inputs.cluster.n_nodes} node{'s' if inputs.cluster.n_nodes > 1 else ''} of "
        f"{inputs.cluster.gpus_per_node}), sequence {inputs.workload.seq_len}, global batch {inputs.workload.global_batch}",
        highlight=False,
    )
    stdout.print(search_header(problem), highlight=False, soft_wrap=True)
    for note in result.notes:
        stdout.print(f"[dim]{note}[/]", highlight=False)
    if result.ranked:
        stdout.print(output.plans_table(result, hw.memory_gib))
        best = result.ranked[0]
        stdout.print(output.winner_sentence(best.plan, best.estimate, hw.memory_gib), highlight=False, soft_wrap=True)
    rejected = ", ".join(f"{reason}: {count:,}" for reason, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]))
    stdout.print(
        f"[dim]{result.sampler}: {result.evaluations:,} plans evaluated of a space of {result.space_size:,} "
        f"in {result.elapsed_s:.2f} s; {result.feasible:,} fit. Rejected: {rejected or 'none'}.[/]",
        highlight=False, soft_wrap=True,
    )
    stdout.print("[dim]Estimates come from an analytic cost model; see `autotune validate` for its measured error.[/]")


@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune predict -m llama3-70b -H h100-sxm5-80gb --gpus 64 -s 8192 -b 512 --plan \"tp=8,pp=4,zero=1,mbs=1,recompute=full\"\n\n"
        "    autotune predict -m gpt3-175b -H a100-sxm4-80gb --gpus 1024 -s 2048 -b 1536 "
        "--plan \"tp=8,pp=16,cp=1,ep=1,vp=1,sp=true,zero=1,mbs=1,recompute=full,precision=bf16\" --json\n\n"
        "Plan keys left out take these defaults: "
        + ", ".join(f"{k}={v}" for k, v in PLAN_DEFAULTS.items())
        + ", sp=true when tp > 1. dp is derived: GPUs / (tp·pp·cp)."
    )
)
def predict(
    model: Model,
    hardware: HardwareOpt,
    plan: Annotated[str, typer.Option("--plan", "-p", help="Plan as key=value pairs: " + ",".join(PLAN_KEYS) + " (serving: tp,pp,ep,weights,kv,max_batch).")],
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Sequence length in tokens (training).")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-b", help="Global batch in sequences (training).")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", "-n", help="Number of GPUs.")] = None,
    gpus_per_node: GpusPerNode = None,
    nodes: Nodes = None,
    tokens: Tokens = None,
    price: Price = None,
    json_out: JsonOut = False,
    calibration: Calibration = None,
    workload: WorkloadKind = "train",
    input_len: InputLen = None,
    output_len: OutputLen = None,
    ttft_ms: TtftMs = None,
    tpot_ms: TpotMs = None,
    concurrency: Concurrency = None,
    request_rate: RequestRate = None,
    framework: FrameworkOpt = None,
) -> None:
    """Estimate one plan: step time and its parts, throughput, MFU, memory and its parts."""
    from . import cli_serve
    from .costmodel import estimate_training

    with user_errors():
        if cli_serve.check_workload(workload) == "serve":
            load = cli_serve.serve_workload(input_len, output_len, ttft_ms, tpot_ms, concurrency, request_rate)
            cli_serve.predict_serve(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                                    workload=load, plan=plan, json_out=json_out, price=price, stdout=stdout)
            return
        cli_serve.require_training(seq_len, global_batch)
        gpus = cli_serve.single_gpu_count(gpus)
        inputs = TrainingRequest(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                                 seq_len=seq_len, global_batch=global_batch, tokens=tokens, price=price,
                                 calibration=calibration, framework=framework).build()
        _note_inputs(inputs)
        try:
            chosen = parse_plan(plan, inputs.cluster.n_gpus)
        except ValueError as exc:
            raise InputError(str(exc), field="--plan") from None
        batch = PlanBatch.from_plans([chosen])
        # Rules that make a plan impossible to run (not merely outside the default space).
        reason = int(rejection_reasons(inputs.model, inputs.cluster, inputs.workload, batch, PERMISSIVE_RULES,
                                       framework=inputs.framework)[0])
        if reason:
            # A plan that breaks a validity rule cannot run: no numbers for it (they would be invented).
            if json_out:
                print(json.dumps({"plan": chosen.as_dict(), "estimate": None, "invalid": REASONS[reason]}))
            else:
                stderr.print(f"[bold red]invalid plan:[/] {escape(REASONS[reason])} "
                             f"({escape(chosen.as_string())}); see `autotune predict --help` for the rules.",
                             highlight=False, soft_wrap=True)
            raise typer.Exit(code=1)
        estimate = estimate_training(inputs.model, inputs.cluster, inputs.workload, batch, inputs.framework).row(0)
        hw = inputs.cluster.hardware
        estimate = output.add_training_totals(estimate, inputs.cluster.n_gpus, tokens, hw.price_usd_per_gpu_hour,
                                              inputs.workload.tokens_per_step)
        estimate = with_confidence(estimate, chosen, hw.name)
        if not estimate["fits"]:
            estimate["infeasible_reason"] = "out of memory"
        if json_out:
            print(json.dumps({"plan": chosen.as_dict(), "framework": inputs.framework.label, "estimate": estimate}))
            return
        stdout.print(f"[bold]{inputs.model.name}[/] on {inputs.cluster.n_gpus} x {hw.name}: {chosen.layout()} with "
                     f"{output.settings_text(chosen)}", highlight=False)
        stdout.print(f"[dim]framework {output.framework_text(inputs.framework, framework is None)}"
                     + ("" if hw.calibrated else f"; {hw.name} is uncalibrated (efficiencies derived, docs/cost-model.md)")
                     + "[/]", highlight=False)
        times, memory = output.breakdown_tables(estimate, hw.memory_gib)
        stdout.print(times)
        stdout.print(memory)
        verdict = "fits" if estimate["fits"] else f"[bold red]does not fit[/] ({estimate.get('infeasible_reason')})"
        stdout.print(
            f"{estimate['tokens_per_s_per_gpu']:,.0f} tokens/s/GPU, {estimate['tflops_per_gpu']:.0f} model TFLOP/s/GPU, "
            f"MFU {estimate['mfu']:.1%} of the {estimate['mfu_peak']} peak; {verdict}.", highlight=False)
        stdout.print(confidence_sentence(estimate.get("confidence")), highlight=False, soft_wrap=True)
        if "training_days" in estimate:
            stdout.print(f"Training {tokens:.3g} tokens: {estimate['training_days']:,.1f} days, "
                         f"{estimate['gpu_hours']:,.0f} GPU-hours, ${estimate['cost_usd']:,.0f}.", highlight=False)


@hardware_app.command("list", epilog="**Example**\n\n    autotune hardware list")
def hardware_list() -> None:
    """List the bundled hardware profiles."""
    with user_errors():
        table = Table(header_style="bold")
        for col in ("name", "bf16 TFLOP/s", "fp8 TFLOP/s", "memory GiB", "HBM GB/s", "GPUs/node", "NIC GB/s/GPU", "$/GPU-h"):
            table.add_column(col, justify="left" if col == "name" else "right")
        for name in hardware_names():
            hw = load_hardware(name)
            fp8 = hw.peak_tflops.get("fp8")
            table.add_row(name, f"{hw.peak_tflops['bf16']:g}", f"{fp8:g}" if fp8 else "-", f"{hw.memory_gib:g}",
                          f"{hw.memory_bandwidth_gb_per_s:g}", str(hw.gpus_per_node),
                          f"{hw.inter_node.bandwidth_gb_per_s:g}", f"{hw.price_usd_per_gpu_hour:.2f}")
        stdout.print(table)


@hardware_app.command("show", epilog="**Example**\n\n    autotune hardware show h100-sxm5-80gb")
def hardware_show(name: Annotated[str, typer.Argument(help="Profile name or YAML path.")]) -> None:
    """Show one hardware profile with the source of every number."""
    import dataclasses

    with user_errors():
        hw = load_hardware(name)
        table = Table(title=f"{hw.name}: {hw.description}", header_style="bold", show_lines=False)
        table.add_column("field")
        table.add_column("value", justify="right")
        table.add_column("source")
        rows = {
            "peak_tflops": ", ".join(f"{k} {v:g}" for k, v in hw.peak_tflops.items()),
            "memory_gib": f"{hw.memory_gib:g}",
            "memory_bandwidth_gb_per_s": f"{hw.memory_bandwidth_gb_per_s:g}",
            "gpus_per_node": str(hw.gpus_per_node),
            "intra_node": f"{hw.intra_node.bandwidth_gb_per_s:g} GB/s, {hw.intra_node.latency_us:g} us",
            "inter_node": f"{hw.inter_node.bandwidth_gb_per_s:g} GB/s, {hw.inter_node.latency_us:g} us",
            "host_link_bandwidth_gb_per_s": f"{hw.host_link_bandwidth_gb_per_s:g}",
            "cpu_optimizer_params_per_s": f"{hw.cpu_optimizer_params_per_s:.3g}",
            "tdp_w": f"{hw.tdp_w:g}",
            "average_power_w": f"{hw.average_power_w:g}",
            "price_usd_per_gpu_hour": f"{hw.price_usd_per_gpu_hour:g}",
        }
        for key, value in rows.items():
            table.add_row(key, value, hw.sources.get(key, ""))
        for key, value in dataclasses.asdict(hw.efficiency).items():
            table.add_row(f"efficiency.{key}", f"{value:g}", hw.sources.get(f"efficiency.{key}", "default (docs/cost-model.md)"))
        stdout.print(table)


@models_app.command("list", epilog="**Example**\n\n    autotune models list")
def models_list() -> None:
    """List the bundled model specs."""
    with user_errors():
        table = Table(header_style="bold")
        for col in ("name", "params", "active", "layers", "hidden", "heads/kv", "ffn", "vocab", "MoE"):
            table.add_column(col, justify="left" if col in ("name", "MoE") else "right")
        for name in model_names():
            m = load_model(name)
            moe = f"{m.moe.n_experts} experts, top-{m.moe.top_k}" if m.moe else "-"
            table.add_row(name, f"{m.n_params / 1e9:.1f}B", f"{m.n_active_params / 1e9:.1f}B", str(m.n_layers),
                          str(m.hidden_size), f"{m.n_heads}/{m.n_kv_heads}", str(m.ffn_hidden_size), str(m.vocab_size), moe)
        stdout.print(table)


@models_app.command("show", epilog="**Example**\n\n    autotune models show llama3-70b\n\n    autotune models show path/to/config.json")
def models_show(name: Annotated[str, typer.Argument(help="Spec name, spec YAML or HF config.json.")]) -> None:
    """Show one model spec and its derived sizes."""
    import dataclasses

    with user_errors():
        m = load_model(name)
        table = Table(title=m.name + (f": {m.description}" if m.description else ""), header_style="bold")
        table.add_column("field")
        table.add_column("value", justify="right")
        for key, value in dataclasses.asdict(m).items():
            if key in ("name", "description", "moe"):
                continue
            table.add_row(key, str(value))
        if m.moe:
            for key, value in dataclasses.asdict(m.moe).items():
                table.add_row(f"moe.{key}", str(value))
        table.add_row("parameters", f"{m.n_params:,}")
        table.add_row("active parameters", f"{m.n_active_params:,}")
        stdout.print(table)


def _register_commands() -> None:
    from . import cli_accuracy, cli_emit, cli_report, cli_study

    cli_accuracy.register(app)
    cli_study.register(app)
    cli_emit.register(app)
    cli_report.register(app)


_register_commands()


def main() -> None:
    app()


if __name__ == "__main__":
    main()
