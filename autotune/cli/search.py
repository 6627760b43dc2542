"""``autotune search``, ``autotune predict`` and ``autotune explain``: training and serving plans."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from ..errors import InputError, comma_items
from ..inputs.catalogue import model_label
from ..inputs.modelspec import ModelSpec, load_model, model_to_mapping, without_launch_only
from ..inputs.request import (
    TrainingRequest,
    cluster_from_options,
    parse_gpus,
    priced_hardware,
    moe_imbalance_note,
    require_training,
    serve_workload,
    single_gpu_count,
)
from ..outputs import tables
from ..outputs.emit.formats import (
    FORMAT_FRAMEWORKS,
    FRAMEWORK_FORMATS,
    SERVING_FORMATS,
    check_formats,
    default_model_path,
    express_all,
    framework_for_formats,
    model_revision_note,
    other_release,
    parse_formats,
    render_formats,
    runs_short,
    search_context,
    serving_files,
)
from ..outputs.explain import explain, explain_serving
from ..outputs.files import (
    SearchFolder,
    check_out_dir,
    plan_entry,
    plans_path,
    read_plans,
    write_search_folder,
)
from ..search.api import (
    CapacitySearch,
    check_engine_runs_on,
    SearchSettings,
    ServingSearch,
    StudyOptions,
    TrainingSearch,
    parse_fixes,
    parse_precisions,
    plan_capacity_search,
    search_serving,
    search_training,
    serving_checkpoint,
    serving_checkpoint_note,
    serving_memory_fraction,
    predict_serve_plan,
    serving_engine,
    serving_parameters,
    wants_capacity,
)
from ..search.plans_file import (memory_headroom_of, model_from_plans, serving_inputs_from_plans,
                                 training_inputs_from_plans)
from ..serving.calibrated import aggregated_only, release_name
from ..search.serving import annotate_checkpoint
from ..serving.checkpoint import with_held_weights
from ..serving.engines import engine_family
from ..serving.estimate import add_serving_cost, estimate_serving
from ..serving.plan import ServePlanBatch, parse_serve_fields, serve_plan_from_fields
from ..serving.space import IMPOSSIBLE as SERVE_IMPOSSIBLE
from ..serving.space import PREFERENCES as SERVE_PREFERENCES
from ..serving.space import REASONS as SERVE_REASONS
from ..serving.space import reason_text as serve_reason_text
from ..serving.space import rejection_reasons as serve_rejection_reasons
from ..training.confidence import sentence as confidence_sentence
from ..training.confidence import with_confidence
from ..training.estimate import add_training_totals, estimate_training
from ..training.plan import (
    PLAN_DEFAULTS,
    PLAN_KEYS,
    PlanBatch,
    parse_plan,
    plan_from_fields,
)
from ..training.space import PERMISSIVE_RULES, reason_text, rejection_reasons
from .app import (
    Calibration,
    CheckpointOpt,
    MemoryFractionOpt,
    Concurrency,
    EngineOpt,
    Fix,
    FrameworkOpt,
    GpusPerNode,
    HardwareOpt,
    Heartbeat,
    InputLen,
    JsonOut,
    Model,
    MoeCapacityFactor,
    MoeImbalance,
    Nodes,
    OptGlobalBatch,
    OptSeqLen,
    OutputLen,
    Price,
    RequestRate,
    Space,
    Tokens,
    TpotMs,
    TtftMs,
    WorkloadKind,
    app,
    path_option,
    check_heartbeat_storage,
    check_study_flags,
    check_workload,
    given_on_command_line,
    note_inputs,
    print_json,
    progress,
    reject_flags,
    say_diagnosis,
    say_note,
    stderr,
    stdout,
    user_errors,
)

# --- search --------------------------------------------------------------------------------------------


def parse_serving_formats(text: str) -> list[str]:
    """``--emit vllm,sglang`` for a serving search: the serving launch formats, each once."""
    names = list(dict.fromkeys(n.lower() for n in comma_items(text, what="--emit", field="--emit")))
    if not names:
        raise InputError(f"name at least one serving format: {', '.join(SERVING_FORMATS)}", field="--emit")
    unknown = [n for n in names if n not in SERVING_FORMATS]
    if unknown:
        raise InputError(f"a serving search writes {', '.join(SERVING_FORMATS)} launch files, but got "
                         f"{', '.join(unknown)}", field="--emit")
    return names



@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune search -m llama3-70b -H h100-sxm5-80gb --gpus 64 --seq-len 8192 --global-batch 512\n\n"
        "    autotune search -m gpt3-175b -H a100-sxm4-80gb --gpus 1024 -s 2048 -b 1536 --sampler tpe --trials 200\n\n"
        "    autotune search -m llama3-8b -H h100-sxm5-80gb --gpus 8 -s 8192 -b 64 --fix tp=1 --objective throughput,memory\n\n"
        "    autotune search -m llama3-70b -H h100-sxm5-80gb --nodes 8 -s 8192 -b 512 --tokens 2e12 --out runs/70b\n\n"
        "    autotune search --workload serve -m llama3-70b -H h100-sxm5-80gb --gpus 8 --input-len 2048 "
        "--output-len 256 --ttft-ms 2000 --tpot-ms 50 --out runs/70b-serve --emit vllm"
    )
)
def search(
    model: Model,
    hardware: HardwareOpt,
    seq_len: OptSeqLen = None,
    global_batch: OptGlobalBatch = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", "-n", help="Number of GPUs, or a range LOW..HIGH (64..4096) to plan capacity: searches whole-node counts in it.")] = None,
    gpus_per_node: GpusPerNode = None,
    nodes: Nodes = None,
    tokens: Tokens = None,
    price: Price = None,
    space: Space = None,
    fix: Fix = None,
    sampler: Annotated[str, typer.Option("--sampler", help="auto | exact | tpe | gp | random. auto: exact when cheap, else TPE.")] = "auto",
    trials: Annotated[int, typer.Option("--trials", help="Trials for tpe / gp / random (finished trials, at most 1,000,000); with --storage, the study's total.")] = 200,
    seed: Annotated[int, typer.Option("--seed", help="Sampler seed: the same seed gives the same answer.")] = 0,
    objective: Annotated[str, typer.Option("--objective", help="throughput | cost | time | memory; comma-separated for a Pareto set.")] = "throughput",
    top: Annotated[int, typer.Option("--top", "-k", help="How many plans to show and write.")] = 10,
    json_out: JsonOut = False,
    out: Annotated[Optional[Path], typer.Option("--out", help="Write plans.json and plans.csv into this folder.", parser=path_option, metavar="<path>")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --out to be a non-empty folder: files of the same name are "
                                     "overwritten, and an earlier search's launch files there that this one does "
                                     "not write again are removed, unless edited since (others are kept).")] = False,
    calibration: Calibration = None,
    emit: Annotated[Optional[str], typer.Option("--emit", help="Also write launch configs for the winner into --out: training: megatron, deepspeed, torchtitan, slurm (comma-separated, of one framework: megatron,slurm; the search keeps to plans they can express); serving: vllm, sglang.")] = None,
    deadline: Annotated[Optional[str], typer.Option("--deadline", help="Capacity planning: finish --tokens within this time: 30d, 720h, 6w, 2mo (months), 90min; 'm' alone is ambiguous.")] = None,
    pue: Annotated[Optional[float], typer.Option("--pue", help="Data-centre PUE for energy [default: 1.58, Uptime Institute 2023 average].")] = None,
    grid_intensity: Annotated[Optional[float], typer.Option("--grid-intensity", help="gCO2e per kWh for emissions [default: 475, world average (IEA 2019)].")] = None,
    storage: Annotated[Optional[str], typer.Option("--storage", help="Keep the trials in an Optuna storage (sqlite:///s.db, postgresql://..., journal:./s.log); a re-run continues up to --trials, `autotune worker` joins. See docs/distributed.md.")] = None,
    study: Annotated[Optional[str], typer.Option("--study", help="Study name in --storage.")] = None,
    new: Annotated[bool, typer.Option("--new", help="Replace an existing study of that name (e.g. after changing the model or space).")] = False,
    heartbeat: Heartbeat = 30,
    workload: WorkloadKind = "train",
    input_len: InputLen = None,
    output_len: OutputLen = None,
    ttft_ms: TtftMs = None,
    tpot_ms: TpotMs = None,
    concurrency: Concurrency = None,
    request_rate: RequestRate = None,
    framework: FrameworkOpt = None,
    precision: Annotated[Optional[str], typer.Option("--precision", help="Training: GEMM precisions to search, comma-separated: bf16 (default), bf16,fp8 or fp8. fp8 is never searched unless named.")] = None,
    memory_headroom: Annotated[Optional[float], typer.Option("--memory-headroom", help="Training: fraction of HBM ranked plans must leave free [default: 0.03: plans use at most 97% of the GPU's memory].")] = None,
    moe_imbalance: MoeImbalance = None,
    moe_capacity_factor: MoeCapacityFactor = None,
    engine: EngineOpt = "vllm",
    checkpoint: CheckpointOpt = None,
    memory_fraction: MemoryFractionOpt = None,
) -> None:
    """Search the plans of a training run (layouts and settings) or, with --workload serve, of a serving deployment
    (tp, pp, replicas, quantization, batch limit under latency targets); print the best, ranked."""
    with user_errors():
        check_study_flags(storage=storage, study=study)
        if force and out is None:
            raise InputError("lets --out write into a non-empty folder: add --out DIR (or drop --force)",
                             field="--force")
        serving_flags = {"--input-len": input_len, "--output-len": output_len, "--ttft-ms": ttft_ms,
                         "--tpot-ms": tpot_ms, "--concurrency": concurrency, "--request-rate": request_rate}
        training_flags = {
            "--seq-len": seq_len, "--global-batch": global_batch, "--tokens": tokens, "--deadline": deadline,
            "--pue": pue, "--grid-intensity": grid_intensity, "--storage": storage, "--study": study,
            "--emit": emit, "--framework": framework, "--precision": precision,
            "--memory-headroom": memory_headroom, "--moe-imbalance": moe_imbalance,
            "--moe-capacity-factor": moe_capacity_factor,
            "--objective": objective if given_on_command_line("objective", objective, "throughput") else None,
            "--sampler": sampler if given_on_command_line("sampler", sampler, "auto") else None,
        }
        if check_workload(workload) == "serve":
            # a serving search is exact: the sampler's and the study's settings have nothing to act on
            # given even at its default value (--trials 200), a flag that has nothing to act on is refused
            training_flags.update({flag: value if given_on_command_line(name, value, default) else None
                                   for flag, name, value, default in (
                ("--trials", "trials", trials, 200), ("--seed", "seed", seed, 0), ("--new", "new", new, False),
                ("--heartbeat", "heartbeat", heartbeat, 30))})
            if top < 1:
                raise InputError(f"must be >= 1, but got {top}", field="--top")
            reject_flags({k: v for k, v in training_flags.items() if k != "--emit"}, "--workload serve")
            serving_formats = parse_serving_formats(emit) if emit is not None else None
            if serving_formats and out is None:
                raise InputError("needs --out DIR, the folder the launch files are written to (next to plans.json)",
                                 field="--emit")
            family, release = serving_engine(engine)
            request = ServingSearch(
                model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                workload=serve_workload(input_len, output_len, ttft_ms, tpot_ms, concurrency, request_rate),
                space=space, fixes=tuple(fix or ()), top=top, price=price, engine=family, checkpoint=checkpoint,
                calibration=calibration, engine_release=release, memory_fraction=memory_fraction)
            raise typer.Exit(code=_search_serving(request, json_out=json_out, out=out, gpus_text=gpus, force=force,
                                                  formats=serving_formats))
        serving_flags.update({"--checkpoint": checkpoint,
                              "--engine": engine if given_on_command_line("engine", engine, "vllm") else None,
                              "--memory-fraction": memory_fraction})
        reject_flags(serving_flags, "training (add --workload serve for serving)")
        require_training(seq_len, global_batch)
        gpu_count, gpu_range = parse_gpus(gpus)
        if emit is not None:
            _check_one_framework(_training_formats(emit, framework))
        if framework is None and emit is not None:
            framework = framework_for_formats(parse_formats(emit))
        elif emit is not None:
            _check_emit_framework(_training_formats(emit, framework), framework)
        if not wants_capacity(gpu_range, hardware, deadline):
            # energy and emissions are reported by capacity planning only: refused, not ignored
            reject_flags({"--pue": pue, "--grid-intensity": grid_intensity},
                         "one cluster's search (they price energy in capacity planning: a --gpus range, several -H "
                         "profiles or --deadline)")
        settings = SearchSettings(space=space, fixes=parse_fixes(fix or []), sampler=sampler, trials=trials,
                                  seed=seed, objective=objective, top=top, precisions=parse_precisions(precision),
                                  **({} if memory_headroom is None else {"memory_headroom": memory_headroom}))
        request = TrainingRequest(model=model, hardware=hardware, gpus=gpu_count, gpus_per_node=gpus_per_node,
                                  nodes=nodes, seq_len=seq_len, global_batch=global_batch, tokens=tokens, price=price,
                                  calibration=calibration, framework=framework, moe_imbalance=moe_imbalance,
                                  moe_capacity_factor=moe_capacity_factor)
        if wants_capacity(gpu_range, hardware, deadline):
            # a study holds one cluster's problem: capacity planning searches many and keeps no trials
            reject_flags({"--storage": storage, "--study": study, "--new": new or None,
                          "--heartbeat": heartbeat if given_on_command_line("heartbeat", heartbeat, 30) else None},
                         "capacity planning (a --gpus range, several -H profiles or --deadline), which searches each "
                         "cluster afresh; run one cluster's search with --storage")
            if emit:
                raise InputError("launch configs are written for one cluster: run the search again with the chosen "
                                 "--gpus and --hardware, and --emit", field="--emit")
            _capacity(CapacitySearch(request=request, settings=settings, gpu_range=gpu_range, deadline=deadline,
                                     pue=pue, grid_intensity=grid_intensity), json_out=json_out, out=out, force=force)
            return
        inputs = request.build()
        note_inputs(inputs)
        formats = None
        if emit is not None:
            formats = _training_formats(emit, framework)
            if out is None:
                raise InputError("needs --out DIR, the folder the launch configs are written to", field="--emit")
            check_formats(formats, inputs.model, inputs.workload)
        if heartbeat < 0:
            raise InputError(f"must be >= 0 seconds, but got {heartbeat}", field="--heartbeat")
        study_options = StudyOptions(storage=storage, study=study, new=new, heartbeat_s=heartbeat or None) if storage else None
        if study and not storage:
            raise InputError("--study names a study in a storage: add --storage sqlite:///study.db (or drop --study)",
                             field="--study")
        if new and not storage:
            raise InputError("--new replaces a stored study: add --storage sqlite:///study.db (or drop --new)",
                             field="--new")
        check_heartbeat_storage(heartbeat, storage)
        if not storage and given_on_command_line("heartbeat", heartbeat, 30):
            raise InputError("sets how often a stored study's running trials report in: add --storage "
                             "sqlite:///study.db (or drop --heartbeat)", field="--heartbeat")
        # Every input is checked before anything is written or any long work starts.
        if out is not None:
            check_out_dir(out, force)
        with progress("searching") as update:
            outcome = search_training(TrainingSearch(
                inputs=inputs, settings=settings, study=study_options,
                express=express_all(formats, inputs.model, inputs.workload) if formats else None), update)
        result = outcome.result
        if result.sampler == "exact" and sampler in ("auto", "exact") and not storage:
            # an exact search evaluates every valid plan: a sampler's budget and seed change nothing (kept in a
            # study, --trials is the study's target and is read)
            unused = [f"--{name} {value}" for name, value, default in (("trials", trials, 200), ("seed", seed, 0))
                      if given_on_command_line(name, value, default)]
            if unused:
                say_note(f"{' and '.join(unused)} {'has' if len(unused) == 1 else 'have'} no effect: the search was "
                         "exact (every valid plan evaluated); --sampler tpe, gp or random reads them")
        say_note(moe_imbalance_note(inputs.workload, outcome.problem.choices["ep"],
                                    best_ep=result.ranked[0].plan.ep if result.ranked else None))
        document = outcome.to_json()
        written: list[Path] = []
        if out is not None:
            files: dict[str, str] = {}
            if formats and result.ranked:
                best = result.ranked[0]
                context = search_context(best.plan, inputs.model, inputs.cluster, inputs.workload, best.estimate)
                files = render_formats(formats, context)
            written = say_folder(write_search_folder(out, document, files, force))
        if json_out:
            print_json(document)
            for note in result.notes:  # stdout holds the JSON only; the study's notes still reach the user
                stderr.print(f"[dim]{escape(note)}[/]", highlight=False, soft_wrap=True)
        else:
            _print_training_search(result, inputs, outcome.problem)
            if written:
                stdout.print("Wrote " + ", ".join(str(p) for p in written))
        if outcome.diagnosis is not None:
            say_diagnosis(outcome.diagnosis)
            raise typer.Exit(code=1)


def _print_training_search(result, inputs, problem) -> None:
    hw = inputs.cluster.hardware
    n_nodes = inputs.cluster.n_nodes
    stdout.print(
        f"[bold]{inputs.model.name}[/] on {inputs.cluster.n_gpus} x {hw.name} ({n_nodes} node{'s' if n_nodes > 1 else ''} "
        f"of {inputs.cluster.gpus_per_node}), sequence {inputs.workload.seq_len}, global batch {inputs.workload.global_batch}",
        highlight=False,
    )
    stdout.print(tables.search_header(problem, inputs.calibration), highlight=False, soft_wrap=True)
    for note in result.notes:
        stdout.print(f"[dim]{note}[/]", highlight=False)
    if result.ranked:
        stdout.print(tables.plans_table(result, hw.memory_gib))
        if inputs.calibration is not None:
            stdout.print(f"[dim]err band: the bundled calibration's errors; with --calibration {escape(inputs.calibration)}"
                         " they do not describe these estimates (`autotune calibrate` reports that fit's held-out "
                         "error).[/]", highlight=False, soft_wrap=True)
        best = result.ranked[0]
        stdout.print(tables.winner_sentence(best.plan, best.estimate, hw.memory_gib), highlight=False, soft_wrap=True)
        alternative = tables.validated_alternative(result)
        if alternative:
            stdout.print(alternative, highlight=False, soft_wrap=True)
    rejected = ", ".join(f"{reason}: {count:,}" for reason, count in sorted(result.rejected.items(), key=lambda kv: -kv[1]))
    stdout.print(
        f"[dim]{result.sampler}: {result.evaluations:,} plans evaluated of a space of {result.space_size:,} "
        f"in {result.elapsed_s:.2f} s; {result.feasible:,} fit. Rejected: {rejected or 'none'}.[/]",
        highlight=False, soft_wrap=True,
    )
    stdout.print("[dim]Estimates come from an analytic cost model; see `autotune validate` for its measured error.[/]")


def _capacity(request: CapacitySearch, *, json_out: bool, out: Path | None, force: bool) -> None:
    if out is not None:
        check_out_dir(out, force)
    with progress("capacity") as update:
        outcome = plan_capacity_search(request, update)
    document = outcome.to_json()
    written: list[Path] = []
    if out is not None:
        written = say_folder(write_search_folder(out, document, {}, force))
    found, given = outcome.found, request.request
    if json_out:
        print_json(document)
    else:
        deadline = f", deadline {found.deadline_days:g} days" if found.deadline_days else ""
        stdout.print(f"[bold]{given.model}[/] on {', '.join(outcome.hardware_names)}: {given.tokens:.3g} tokens, "
                     f"sequence {given.seq_len}, global batch {given.global_batch}{deadline}", highlight=False)
        stdout.print(tables.capacity_table(found))
        what = {"cost": "Cheapest in time", "memory": "Leanest in time"}.get(found.objective, "Fastest in time")
        if found.chosen:
            stdout.print(f"[bold]{what}:[/] {tables.candidate_text(found.chosen)}.", highlight=False, soft_wrap=True)
        if found.cheapest and found.cheapest is not found.chosen:
            # at --price 0 every plan costs $0 and the tie goes to the fewest GPUs: say that, not "cheapest"
            label = ("Cheapest in time" if found.cheapest.totals["cost_usd"] > 0
                     else "Fewest GPUs in time (every plan costs $0 at this price)")
            stdout.print(f"{label}: {tables.candidate_text(found.cheapest)}.", highlight=False, soft_wrap=True)
        if found.fastest and found.fastest is not found.chosen:
            stdout.print(f"Fastest: {tables.candidate_text(found.fastest)}.", highlight=False, soft_wrap=True)
        stdout.print(f"[dim]Energy = GPUs x average board power x hours x PUE {found.pue:g} ({found.pue_source}); "
                     f"emissions at {found.grid_g_per_kwh:g} gCO2e/kWh ({found.grid_source}). "
                     "Money at each profile's price per GPU-hour (--price overrides it for every profile).[/]",
                     highlight=False, soft_wrap=True)
        if outcome.uncalibrated:
            stdout.print(f"[dim]--calibration has no values for {', '.join(outcome.uncalibrated)}: estimated with "
                         "the profile's own parameters.[/]", highlight=False, soft_wrap=True)
        if written:
            stdout.print("Wrote " + ", ".join(str(p) for p in written))
    if found.chosen is None:
        fastest = found.fastest
        notes = {c.note for c in found.candidates if c.plan is None}
        if fastest is None and len(notes) == 1 and notes != {"no plan fits"}:  # one reason, not memory: say it
            stderr.print(f"[bold red]no plan fits on any of the GPUs and counts compared[/]: {escape(notes.pop())}.",
                         soft_wrap=True, highlight=False)
        elif fastest is None and all(n.startswith("no valid plan") for n in notes):
            stderr.print("[bold red]no plan fits on any of the GPUs and counts compared[/]: every plan breaks a "
                         "validity rule; each row's note names the commonest and what to change.", soft_wrap=True,
                         highlight=False)
        elif fastest is None:  # nothing fits anywhere: memory, or a precision the GPUs lack (the table says which)
            stderr.print("[bold red]no plan fits on any of the GPUs and counts compared[/] (out of memory, unless a "
                         "row's note says otherwise); widen --gpus, add --hardware profiles with more memory, or "
                         "shorten --seq-len.",
                         soft_wrap=True)
        else:
            stderr.print(f"[bold red]no plan meets the deadline.[/] the fastest, {fastest.gpus} x {fastest.hardware}, "
                         f"takes {fastest.totals['training_days']:,.1f} days; widen --gpus or move --deadline.",
                         soft_wrap=True)
        raise typer.Exit(code=1)


def say_folder(folder: SearchFolder) -> list[Path]:
    """Name the earlier search's launch files a --force search removed (they launched plans it no longer holds)
    and those it kept (edited since); the paths it wrote."""
    if folder.removed:
        stderr.print(f"[yellow]note:[/] removed the earlier search's launch files that these plans replace: "
                     f"{escape(', '.join(str(p) for p in folder.removed))}.", highlight=False, soft_wrap=True)
    for path, why in folder.kept:
        stderr.print(f"[yellow]note:[/] kept {escape(str(path))}: {escape(why)}; it launches the earlier search's "
                     "plan, not these (remove it by hand when it is no longer wanted).", highlight=False,
                     soft_wrap=True)
    return folder.written


def _say_checkpoint_note(model: str, checkpoint: str | None) -> None:
    note = serving_checkpoint_note(model, checkpoint)
    if note:
        stderr.print(f"[yellow]note:[/] {escape(note)}.", highlight=False, soft_wrap=True)


def _search_serving(request: ServingSearch, *, json_out: bool, out: Path | None, gpus_text: str | None,
                    force: bool = False, formats: list[str] | None = None) -> int:
    """Run the serving search and print it (with ``formats``, write the best plan's launch files); the exit status."""
    if out is not None:
        check_out_dir(out, force)
    outcome = search_serving(request)
    _say_checkpoint_note(request.model, request.checkpoint)
    document = outcome.to_json()
    checkpoint_note = serving_checkpoint_note(request.model, request.checkpoint)
    if checkpoint_note:
        document["inputs"]["checkpoint_note"] = checkpoint_note
    written: list[Path] = []
    result, workload, hw = outcome.result, request.workload, outcome.hardware
    if out is not None:
        files: dict[str, str] = {}
        if formats and result is not None and result.ranked:
            best = result.ranked[0]
            revision_note = model_revision_note(request.model)
            if revision_note:
                stderr.print(f"[yellow]note:[/] {escape(revision_note)}.", highlight=False, soft_wrap=True)
            for name in formats:
                # an id whose weights are not --checkpoint's, or not the plan's: the scripts ask for MODEL rather
                # than load the id's (as emit)
                model_path = default_model_path(request.model, outcome.checkpoint, best.plan.weights, name,
                                                is_moe=outcome.model.is_moe, fp4_cores=hw.supports("fp4"))
                # the other engine's files quote its estimate with the overlay's parameters for it, as predict would
                other_params = None
                if name != request.engine and request.calibration is not None:
                    try:
                        other_params = serving_parameters(name, request.calibration)[0]
                    except InputError:
                        stderr.print(f"[yellow]note:[/] {escape(request.calibration)} has no parameters for {name}: "
                                     f"the {name} files quote the shipped ones.", highlight=False, soft_wrap=True)
                engine_files, on_engine = serving_files(name, best.plan, outcome.model, hw, workload.input_len,
                                                        workload.output_len,
                                                        best.estimate if name == request.engine else None,
                                                        model_path,
                                                        gpus_per_node=outcome.gpus_per_node,
                                                        checkpoint=outcome.checkpoint,
                                                        # the fraction is a value of the searched engine's flag
                                                        memory_fraction=outcome.request.memory_fraction
                                                        if name == request.engine else None,
                                                        release=outcome.request.engine_release,
                                                        workload=workload, params=other_params,
                                                        model_name=request.model)
                other = other_release(name, outcome.request.engine_release)
                if other:
                    stderr.print(f"[yellow]note:[/] {escape(other.removeprefix('WARNING: '))}.", highlight=False,
                                 soft_wrap=True)
                if name != request.engine:
                    reason = on_engine.get("infeasible_reason", "see emit")
                    if not on_engine.get("fits") and not runs_short(name, on_engine):
                        # weights or a reserve past that engine's budget, or a precision the GPU lacks: the engine
                        # would not start, and `emit` refuses the same plan; nothing is written for it
                        stderr.print(f"[yellow]note:[/] the plans were ranked for {request.engine}; the best of them "
                                     f"cannot run on {name} ({escape(reason)}), so no {name} files are written; "
                                     f"`autotune emit --format {name} --allow-no-fit` on the plans.json writes them "
                                     "anyway, or search with --engine " + name + ".", highlight=False, soft_wrap=True)
                        continue
                    verdict = ("its batch fits that engine's memory budget" if on_engine.get("fits") else
                               f"it does not fit there: {reason}")
                    stderr.print(f"[yellow]note:[/] the plans were ranked for {request.engine}; the {name} files "
                                 f"launch the best of them on {name}, re-checked: {verdict}.", highlight=False,
                                 soft_wrap=True)
                files.update(engine_files)  # each engine's script has its own name (serve_vllm.sh, serve_sglang.sh)
        written = say_folder(write_search_folder(out, document, files, force))

    # targets no plan meets are an impossible constraint: the closest plans are still shown (and written), but the
    # exit status says so, as for a training search where nothing fits
    missed = bool(result and result.ranked and not result.ranked[0].estimate["meets_targets"])
    if json_out:
        print_json(document)
        if missed:
            _say_missed(result.ranked[0].estimate, request, checkpoint=outcome.checkpoint)
        return 0 if result and result.ranked and not missed else 1
    load = workload.load_text
    targets = ", ".join(t for t in (f"TTFT <= {workload.ttft_ms:g} ms" if workload.ttft_ms else "",
                                    f"TPOT <= {workload.tpot_ms:g} ms" if workload.tpot_ms else "") if t) or "none"
    capacity = outcome.capacity
    if capacity is not None:
        # per count, the plans the capacity counts: those meeting the targets whose weights the checkpoint runs
        # (the JSON's capacity.tried[].meeting_runnable, not search.meeting_targets)
        tried = (f"GPUs: plans that meet them and run from the {outcome.checkpoint} checkpoint: "
                 + ", ".join(f"{g}: {m}" for g, m in capacity.tried))
        if capacity.n_gpus is None:
            loosen = " or loosen --ttft-ms/--tpot-ms" if workload.ttft_ms or workload.tpot_ms else ""
            stdout.print(f"No GPU count in {gpus_text} serves {workload.request_rate:g} requests/s within the targets "
                         f"({tried}); widen the --gpus range, lower --request-rate{loosen}, or state a quantized "
                         "checkpoint (--checkpoint fp8, nvfp4).", highlight=False, soft_wrap=True)
            return 1
        stdout.print(f"[bold]Fewest GPUs: {capacity.n_gpus}[/] serve {workload.request_rate:g} requests/s within "
                     f"the targets ({tried}).", highlight=False, soft_wrap=True)
    stdout.print(f"[bold]{escape(model_label(request.model, outcome.model.name))}[/] serving on {outcome.n_gpus} x "
                 f"{hw.name}; input {workload.input_len}, "
                 f"output {workload.output_len} tokens; load: {load}; targets: {targets}", highlight=False)
    stdout.print(f"[dim]engine {request.engine}: {outcome.parameters_note}; checkpoint {outcome.checkpoint}[/]",
                 highlight=False, soft_wrap=True)
    if result.ranked:
        no_targets = not workload.has_targets
        stdout.print(tables.serving_plans_table(result, hw.memory_gib, targets_set=not no_targets))
        best = result.ranked[0]
        e = best.estimate
        # with no target there is nothing to meet: "meets the targets" read as if a latency had been checked
        verdict = ("no latency target set (--ttft-ms, --tpot-ms)" if no_targets else
                   "meets the targets" if e["meets_targets"] else f"misses: {e.get('misses', '')}")
        needs = f" It {e['needs_checkpoint']}." if e.get("needs_checkpoint") else ""
        num = tables.number_text
        stdout.print(f"Best: {best.plan.layout()} ({best.plan.as_string()}): {num(e['output_tokens_per_s'], ',.0f')} "
                     f"output tokens/s ({num(e['output_tokens_per_s_per_gpu'], ',.0f')} per GPU), "
                     f"TTFT {tables.latency_text(e['ttft_ms'])}, "
                     f"TPOT {tables.latency_text(e['tpot_ms'], 1)}; {verdict}; {e['memory_gib_per_gpu']:.1f} GiB per GPU "
                     f"{budget_text(request.engine, e)}.{needs}",
                     highlight=False, soft_wrap=True)
        stdout.print(cost_text(e), highlight=False, soft_wrap=True)
    rejected = ", ".join(f"{k}: {v:,}" for k, v in sorted(result.rejected.items(), key=lambda kv: -kv[1]))
    stdout.print(f"[dim]exact: {result.evaluations:,} plans evaluated of a space of {result.space_size:,} in "
                 f"{result.elapsed_s:.2f} s; {result.feasible:,} fit"
                 f"{f', {result.meeting:,} meet the targets' if workload.has_targets else ''}. "
                 f"Rejected: {rejected or 'none'}.[/]", highlight=False, soft_wrap=True)
    stdout.print("[dim]Estimates come from an analytic serving model; see `autotune validate` on serving runs for "
                 "its measured error.[/]")
    if written:
        stdout.print("Wrote " + ", ".join(str(p) for p in written), highlight=False, soft_wrap=True)
    if not result.ranked:
        stderr.print(f"[bold red]no serving plan fits.[/] {_no_fit_hint(result, request, outcome.space)}",
                     soft_wrap=True, highlight=False)
        return 1
    if missed:
        _say_missed(result.ranked[0].estimate, request, checkpoint=outcome.checkpoint)
        return 1
    return 0


def _say_missed(estimate: dict, request: ServingSearch, *, checkpoint: str) -> None:
    """One line on stderr when no plan meets the targets: what the best plan misses and what would help."""
    workload, misses = request.workload, str(estimate.get("misses", ""))
    over_capacity = "exceeds capacity" in misses
    fixes = ["loosen --ttft-ms/--tpot-ms"] if (workload.ttft_ms or workload.tpot_ms) and not over_capacity else []
    fixes.append("add GPUs (with --request-rate, --gpus LOW..HIGH finds the fewest that serve it)"
                  if workload.mode == "rate" else "add GPUs")
    if workload.mode in ("rate", "concurrency"):
        fixes.append(f"lower --{'request-rate' if workload.mode == 'rate' else 'concurrency'}")
    if checkpoint == "bf16":
        fixes.append("state a quantized checkpoint (--checkpoint fp8, nvfp4)")
    listed = fixes[0] if len(fixes) == 1 else f"{', '.join(fixes[:-1])} or {fixes[-1]}"
    stderr.print(f"[bold red]no plan meets the targets[/] (the best plan misses: {misses}); {listed}.",
                 soft_wrap=True, highlight=False)


def cost_text(e: dict) -> str:
    """One line of what a serving plan costs (serving.estimate.add_serving_cost)."""
    per_million = e.get("usd_per_million_output_tokens")
    tokens = (f"${tables.number_text(per_million, ',.3f')} per million output tokens" if per_million is not None
              else "no output tokens to price")  # 0 at --price 0 is a price; None: the plan produces no tokens
    return (f"Cost: ${e['usd_per_hour']:,.2f} per hour at ${e['usd_per_gpu_hour']:g} per GPU-hour (--price sets it), "
            f"{tokens}.")


def _framework_key(framework: str) -> str:
    """``--framework megatron@2024-07`` -> ``megatron-lm``: the profile name the launch formats are keyed by."""
    name = framework.partition("@")[0]
    return {"megatron": "megatron-lm"}.get(name, name)


def _training_formats(emit: str, framework: str | None) -> list[str]:
    """``--emit`` as parsed, with a bare ``slurm`` running the --framework searched (it ran Megatron-LM whatever the
    framework, quoting that framework's estimate); ``slurm:X`` keeps the X written."""
    formats = parse_formats(emit)
    runs = FRAMEWORK_FORMATS.get(_framework_key(framework or ""))
    written = [t.strip().lower() for t in emit.split(",")]
    if runs and not any(t.startswith("slurm:") for t in written) and not any(t in FORMAT_FRAMEWORKS for t in written):
        formats = [f"slurm:{runs}" if f.startswith("slurm:") else f for f in formats]
    return formats


def _check_one_framework(formats: list[str]) -> None:
    """A search plans for one framework, whose estimate its launch files quote: files of a second framework would
    quote the first one's step time and memory (DeepSpeed's ZeRO-3 plan can need 85 GiB where Megatron-LM's needs
    60), so --emit names the formats of one framework (slurm:X runs X)."""
    runs = {}
    for spec in formats:
        base, _, inner = spec.partition(":")
        target = FORMAT_FRAMEWORKS.get(base) or FORMAT_FRAMEWORKS.get(inner)
        if target:
            runs.setdefault(target, spec)
    if len(runs) > 1:
        raise InputError(f"a search plans for one framework, but the formats run {len(runs)} "
                         f"({', '.join(f'{s}: {f}' for f, s in runs.items())}); emit one framework's formats, then "
                         f"`autotune emit DIR --format FORMAT` for another (it re-estimates the plan for the framework "
                         "its files run)", field="--emit")


def _check_emit_framework(formats: list[str], framework: str) -> None:
    """A launch format runs one framework: a search planned for another would quote that one's estimate in
    files that run this one (emit refuses the same pairing)."""
    name = _framework_key(framework)
    for spec in formats:
        outer, _, inner = spec.partition(":")
        base = inner if outer == "slurm" else outer  # slurm:X runs X's files
        if base in FORMAT_FRAMEWORKS and FRAMEWORK_FORMATS.get(name) != base:
            raise InputError(f"{base} launch configs run {FORMAT_FRAMEWORKS[base]}, but --framework is {framework!r}; "
                             "drop --framework, or emit that framework's format (or emit the plans.json later with "
                             "`autotune emit`, which re-estimates a plan for the framework its files run)",
                             field="--emit")


def _no_fit_hint(result, request, space=None) -> str:
    """What to change when no serving plan fits, from what rejected the plans (a lower weight precision only where
    the space searched did not hold one)."""
    context = next((k for k in result.rejected if "context window" in k), None)
    if context:
        return (f"The {context}: shorten --input-len/--output-len, or give the model its longer context (a spec "
                "YAML's max_seq_len, an HF config.json's rope_scaling).")
    if request.fixes and not result.evaluations:
        # the layouts whose replicas do not divide the GPU count are always many; name another reason first
        reasons = sorted(result.rejected.items(), key=lambda kv: ("divide" in kv[0], -kv[1]))
        top = reasons[0][0] if reasons else "no valid plan"
        return (f"No plan of the space holds with --fix {' '.join(request.fixes)} on {result.n_gpus} GPUs "
                f"(mostly: {top}); relax --fix.")
    if request.fixes:
        return (f"Relax --fix {' '.join(request.fixes)}, or try more GPUs or a shorter --input-len/--output-len.")
    searched = set(space.axes.get("weights", ())) if space is not None else set()
    lower = [w for w in ("fp8", "int4", "fp4") if w not in searched]
    if lower:
        return (f"Try more GPUs, a lower weight precision ({', '.join(lower)}: add it to the --space weights axis) or "
                "a shorter --input-len/--output-len.")
    return ("Try more GPUs or a shorter --input-len/--output-len (every weight precision of the space, "
            f"{', '.join(space.axes['weights'])}, was searched).")


# --- predict -------------------------------------------------------------------------------------------


@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune predict -m llama3-70b -H h100-sxm5-80gb --gpus 64 -s 8192 -b 512 --plan \"tp=8,pp=4,zero=1,mbs=1,recompute=full\"\n\n"
        "    autotune predict -m gpt3-175b -H a100-sxm4-80gb --gpus 1024 -s 2048 -b 1536 "
        "--plan \"tp=8,pp=16,cp=1,ep=1,vp=1,sp=true,zero=1,mbs=1,recompute=full,precision=bf16\" --json\n\n"
        "    autotune predict --workload serve -m llama3-70b -H h100-sxm5-80gb --gpus 8 "
        "-p tp=4,weights=fp8,kv=fp8,max_batch=128 --input-len 2048 --output-len 256\n\n"
        "Plan keys left out take these defaults: "
        + ", ".join(f"{k}={v}" for k, v in PLAN_DEFAULTS.items())
        + ", sp=true when tp > 1. dp is derived: GPUs / (tp·pp·cp).\n\n"
        "Exit status: 0 when the plan runs (whether or not it meets --ttft-ms/--tpot-ms), 1 when it cannot (a rule "
        "it breaks: no numbers; it does not fit in memory or the engine's budget: its numbers are still printed), 2 "
        "for an input error. Unlike search, which exits 1 when no plan meets the targets, a predicted plan that "
        "misses them is an answer."
    )
)
def predict(
    model: Model,
    hardware: HardwareOpt,
    plan: Annotated[str, typer.Option("--plan", "-p", help="Plan as key=value pairs: " + ",".join(PLAN_KEYS) + " (serving: tp,pp,ep,weights,kv,max_batch).")],
    seq_len: OptSeqLen = None,
    global_batch: OptGlobalBatch = None,
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
    moe_imbalance: MoeImbalance = None,
    moe_capacity_factor: MoeCapacityFactor = None,
    engine: EngineOpt = "vllm",
    checkpoint: CheckpointOpt = None,
    memory_fraction: MemoryFractionOpt = None,
) -> None:
    """Estimate one plan: training (step time and its parts, throughput, MFU, memory) or, with --workload serve,
    serving (output tokens/s, TTFT, TPOT, batch, memory)."""
    with user_errors():
        if check_workload(workload) == "serve":
            reject_flags({"--framework": framework, "--seq-len": seq_len, "--global-batch": global_batch,
                          "--tokens": tokens, "--moe-imbalance": moe_imbalance,
                          "--moe-capacity-factor": moe_capacity_factor}, "--workload serve")
            load = serve_workload(input_len, output_len, ttft_ms, tpot_ms, concurrency, request_rate)
            _predict_serving(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                             workload=load, plan=plan, json_out=json_out, price=price, engine=engine,
                             checkpoint=checkpoint, calibration=calibration, memory_fraction=memory_fraction)
            return
        reject_flags({"--checkpoint": checkpoint,
                      "--engine": engine if given_on_command_line("engine", engine, "vllm") else None,
                      "--memory-fraction": memory_fraction, "--input-len": input_len, "--output-len": output_len,
                      "--ttft-ms": ttft_ms, "--tpot-ms": tpot_ms,
                      "--concurrency": concurrency, "--request-rate": request_rate},
                     "training (add --workload serve for serving)")
        require_training(seq_len, global_batch)
        inputs = TrainingRequest(model=model, hardware=hardware, gpus=single_gpu_count(gpus), gpus_per_node=gpus_per_node,
                                 nodes=nodes, seq_len=seq_len, global_batch=global_batch, tokens=tokens, price=price,
                                 calibration=calibration, framework=framework, moe_imbalance=moe_imbalance,
                                 moe_capacity_factor=moe_capacity_factor).build()
        note_inputs(inputs)
        try:
            chosen = parse_plan(plan, inputs.cluster.n_gpus)
        except ValueError as exc:
            raise InputError(str(exc), field="--plan") from None
        say_note(moe_imbalance_note(inputs.workload, [chosen.ep]))
        batch = PlanBatch.from_plans([chosen])
        # Rules that make a plan impossible to run (not merely outside the default space).
        reason = int(rejection_reasons(inputs.model, inputs.cluster, inputs.workload, batch, PERMISSIVE_RULES,
                                       framework=inputs.framework)[0])
        if reason:
            # A plan that breaks a validity rule cannot run: no numbers for it (they would be invented).
            why = reason_text(reason, chosen, inputs.framework, model=inputs.model, cluster=inputs.cluster,
                              workload=inputs.workload)
            if json_out:
                print_json({"plan": chosen.as_dict(), "estimate": None, "invalid": why})
            else:
                stderr.print(f"[bold red]invalid plan:[/] {escape(why)} "
                             f"({escape(chosen.as_string())}); see `autotune predict --help` for the rules.",
                             highlight=False, soft_wrap=True)
            raise typer.Exit(code=1)
        estimate = estimate_training(inputs.model, inputs.cluster, inputs.workload, batch, inputs.framework).row(0)
        hw = inputs.cluster.hardware
        estimate = add_training_totals(estimate, inputs.cluster.n_gpus, tokens, hw.price_usd_per_gpu_hour,
                                       inputs.workload.tokens_per_step)
        estimate = with_confidence(estimate, chosen, hw.name, moe_model=inputs.model.moe is not None,
                                   calibration=inputs.calibration)
        if not estimate["fits"]:
            estimate["infeasible_reason"] = "out of memory"
        if json_out:
            moe = {k: v for k, v in (("moe_imbalance", inputs.workload.moe_imbalance),
                                      ("moe_capacity_factor", inputs.workload.moe_capacity_factor))
                   if v is not None and (k != "moe_imbalance" or v != 1.0)}
            print_json({"plan": chosen.as_dict(), "framework": inputs.framework.label, **moe, "estimate": estimate})
            _exit_unless_fits(estimate)
            return
        stdout.print(f"[bold]{inputs.model.name}[/] on {inputs.cluster.n_gpus} x {hw.name}: {chosen.layout()} with "
                     f"{tables.settings_text(chosen)}", highlight=False)
        stdout.print(f"[dim]framework {tables.framework_text(inputs.framework, framework is None)}"
                     + ("" if hw.calibrated else f"; {hw.name} is uncalibrated (efficiencies derived, docs/cost-model.md)")
                     + "[/]", highlight=False)
        times, memory = tables.breakdown_tables(estimate, hw.memory_gib)
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
        _exit_unless_fits(estimate)


def _predict_serving(*, model: str, hardware: str, gpus: str | None, gpus_per_node: int | None, nodes: int | None,
                     workload, plan: str, json_out: bool, price: float | None, engine: str = "vllm",
                     checkpoint: str | None = None, calibration: str | None = None,
                     memory_fraction: float | None = None) -> None:
    fraction = serving_memory_fraction(memory_fraction)
    spec = load_model(model)
    hw = priced_hardware(hardware, price)
    cluster = cluster_from_options(hw, single_gpu_count(gpus), gpus_per_node, nodes)
    try:
        fields = parse_serve_fields(plan)
    except ValueError as exc:
        raise InputError(f"{exc}", field="--plan") from None
    family, release = serving_engine(engine)
    check_engine_runs_on(family, hw)
    params, note = serving_parameters(engine, calibration)
    ckpt = serving_checkpoint(model, checkpoint, spec)
    _say_checkpoint_note(model, checkpoint)
    chosen, engine_limit = predict_serve_plan(fields, cluster.n_gpus, family, hw.memory_gib, checkpoint=ckpt,
                                              gpu=hw.name)
    if chosen.disaggregated and aggregated_only(release):
        raise InputError(f"{release_name(release)} is planned aggregated only (its parameters come from aggregated "
                         "tables); give an agg plan or a 1.x release", field="--plan")
    engine = family  # its memory rule and defaults (the release set the parameters)
    batch = ServePlanBatch.from_plans([chosen])
    reason = int(serve_rejection_reasons(spec, cluster, batch, frozenset({"dp"}), engine=engine, checkpoint=ckpt)[0])
    if SERVE_REASONS[reason] in SERVE_IMPOSSIBLE:
        # as for a training plan: a layout the model cannot split has no numbers (they would be invented)
        why = serve_reason_text(reason, chosen, spec)
        if json_out:
            print_json({"plan": chosen.as_dict(), "estimate": None, "invalid": why})
        else:
            stderr.print(f"[bold red]invalid plan:[/] {escape(why)} ({escape(chosen.as_string())}); see `autotune "
                         "predict --help` for the rules.", highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)
    estimate = annotate_checkpoint(estimate_serving(spec, cluster, workload, batch, params, engine=engine,
                                                    engine_batch_limit=engine_limit,
                                                    memory_fraction=fraction).row(0),
                                   chosen, ckpt, engine, spec.is_moe, fp4_cores=hw.supports("fp4"))
    estimate = add_serving_cost(estimate, cluster.n_gpus, hw.price_usd_per_gpu_hour)
    if reason and SERVE_REASONS[reason] in SERVE_PREFERENCES:
        estimate["warning"] = (f"{SERVE_REASONS[reason]}: the engine runs it multi-node, its all-reduce over the "
                               "network as priced here, but search does not plan it")
    elif reason:
        estimate["fits"] = False
        estimate["meets_targets"] = False
        estimate["infeasible_reason"] = SERVE_REASONS[reason]
    if json_out:
        document = {"plan": chosen.as_dict(), "engine": engine, "engine_release": release_name(release) if release
                    else None, "parameters": note, "estimate": estimate}
        checkpoint_note = serving_checkpoint_note(model, checkpoint)
        print_json({**document, "checkpoint_note": checkpoint_note} if checkpoint_note else document)
        _exit_unless_fits(estimate)
        return
    e = estimate
    stdout.print(f"[bold]{escape(model_label(model, spec.name))}[/] on {cluster.n_gpus} x {hw.name}: {chosen.layout()} "
                 f"({chosen.as_string()})",
                 highlight=False)
    stdout.print(f"[dim]engine {engine}: {note}; checkpoint {ckpt}[/]", highlight=False, soft_wrap=True)
    mem = e["memory_breakdown_gib"]
    num = tables.number_text
    # a disaggregated plan's headline is the fuller pool's GPU (as search ranks and explain shows), its parts the
    # decode GPU's: each said, with both pools' totals
    parts_of = (f" (the fuller pool's; prefill GPU {e['prefill_memory_gib_per_gpu']:.1f}, decode GPU "
                f"{e['decode_memory_gib_per_gpu']:.1f}); a decode GPU's parts"
                if "decode_memory_gib_per_gpu" in e and "prefill_memory_gib_per_gpu" in e else "")
    # one output token decodes nothing: the time per output token is the step a second one would take
    tpot_text = (f"{tables.latency_text(e['tpot_ms'], 1)} (a second token's step; one output token has no TPOT)"
                 if workload.output_len == 1 else tables.latency_text(e['tpot_ms'], 1))
    stdout.print(f"{num(e['output_tokens_per_s'], ',.0f')} output tokens/s ({num(e['output_tokens_per_s_per_gpu'], ',.0f')} "
                 f"per GPU, {e['tokens_per_s_per_user']:,.1f} per user); TTFT {tables.latency_text(e['ttft_ms'])}, TPOT "
                 f"{tpot_text}; {batch_text(e['batch'], e['max_batch_fit'])}; memory {e['memory_gib_per_gpu']:.1f} GiB per GPU "
                 f"{budget_text(engine, e)}{parts_of}: weights {mem['weights']:.1f}, KV {mem['kv_cache']:.1f} "
                 f"(pool {mem['kv_pool']:.1f}), activations {mem['activations']:.1f}, CUDA graphs "
                 f"{mem['cuda_graphs']:.1f}, runtime {mem['runtime']:.1f}.", highlight=False, soft_wrap=True)
    if e["fits"]:  # a plan that cannot run has no cost to quote
        stdout.print(cost_text(e), highlight=False, soft_wrap=True)
    if e.get("needs_checkpoint"):
        stdout.print(f"[bold yellow]checkpoint[/]: this plan {e['needs_checkpoint']}.", highlight=False, soft_wrap=True)
    if e.get("warning"):
        stdout.print(f"[bold yellow]warning[/]: {e['warning']}.", highlight=False, soft_wrap=True)
    if not e["fits"]:
        # a rule of the GPU or the engine (a precision it has no kernels for) is not a question of memory
        verdict = "cannot run" if reason and SERVE_REASONS[reason] not in SERVE_PREFERENCES else "does not fit"
        stdout.print(f"[bold red]{verdict}[/]: {e.get('infeasible_reason')}", highlight=False)
    elif e.get("misses"):
        stdout.print(f"[bold yellow]misses[/]: {e['misses']}", highlight=False)
    _exit_unless_fits(e)


def batch_text(batch: float | None, fit: int) -> str:
    """The running batch beside what the KV budget holds at full length.  The engines admit on a share of the
    output (they allocate blocks as tokens come), so the mean batch may pass the full-length count; with no room
    for one sequence there is no batch to state (the solver's floor of one is not one the engine could run)."""
    if not fit:
        return "no batch per replica (the KV budget holds no sequence)"
    return f"batch {tables.number_text(batch, '.1f')} per replica (the KV budget holds {fit} at full length)"


def budget_text(engine: str, e: dict) -> str:
    """Where a plan's memory sits: vLLM's flag caps the whole process (its budget is the flag's share of the GPU);
    SGLang's and TensorRT-LLM's size the weights and KV cache or the KV cache alone, within the whole GPU."""
    flag = memory_flag_text(e["engine_memory_flag"])
    if engine_family(engine) == "vllm":
        return f"within the {engine} budget of {e['memory_budget_gib']:.1f} GiB ({flag})"
    sized = "the weights and KV cache" if engine_family(engine) == "sglang" else "the KV cache"
    return f"of the GPU's {e['memory_budget_gib']:.1f} GiB ({flag} sizes {sized})"


def memory_flag_text(flags: dict) -> str:
    """The engine's memory flag as a launch would set it; a value outside (0, 1] (the weights and buffers alone pass
    the GPU's memory) is no value the flag takes, and says so instead of printing it as if it were one."""
    return ", ".join(f"{k} {v:g}" if 0.0 < v <= 1.0 else f"no {k} leaves room: it would be {v:g}"
                     for k, v in flags.items())


def _exit_unless_fits(estimate: dict) -> None:
    """A predicted plan that cannot run (out of memory, past the engine's budget, a precision the GPU lacks) exits 1
    after its numbers are printed, as a search where nothing fits does: a script that launches what predict accepts
    (``autotune predict ... && launch``) must not launch it.  Missing a latency target is an answer, not a failure,
    and so is a layout search would not choose (tp over nodes): status 0."""
    if not estimate["fits"]:
        raise typer.Exit(code=1)


# --- explain -------------------------------------------------------------------------------------------


@app.command(
    "explain",
    epilog=("**Examples**\n\n    autotune explain runs/70b/plans.json --rank 2\n\n"
            "    autotune explain runs/70b-serve   (a serving plans.json, or its folder, from search --workload serve)\n\n"
            "    autotune explain -m llama3-70b -H h100-sxm5-80gb --gpus 64 -s 8192 -b 512 "
            "--plan \"tp=8,pp=4,zero=1,mbs=1,recompute=selective\""),
)
def explain_command(
    plans: Annotated[Optional[Path], typer.Argument(help="A plans.json from `autotune search --out DIR` (or its folder), training or serving.", parser=path_option, metavar="<path>")] = None,
    rank: Annotated[int, typer.Option("--rank", "-r", help="Which plan of PLANS to explain (1 = best).")] = 1,
    plan: Annotated[Optional[str], typer.Option("--plan", "-p", help="A training plan as key=value pairs (instead of PLANS).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model (with --plan; with PLANS it replaces the spec the file embeds: the plan explained for another model, with a note).")] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", "-H", help="Hardware profile (with --plan; training PLANS: replaces the file's).")] = None,
    gpus: Annotated[Optional[str], typer.Option("--gpus", "-n", help="Number of GPUs (with --plan; one count).")] = None,
    gpus_per_node: GpusPerNode = None,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Sequence length (with --plan).")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-b", help="Global batch in sequences (with --plan).")] = None,
    calibration: Calibration = None,
    framework: FrameworkOpt = None,
    json_out: JsonOut = False,
) -> None:
    """Explain one plan, training or serving: where its time (or latency) and memory go, what binds, and what each
    one-step change does."""
    with user_errors():
        gpus = single_gpu_count(gpus)  # typed as text: a range is answered here, not by the option parser
        if plans is not None and plan is not None:
            raise InputError("give the plan once: a plans.json (PLANS, with --rank K) or --plan, not both",
                             field="--plan")
        if (plans is None) == (plan is None):
            raise InputError("give a plans.json (with --rank K) or --plan with --model, --hardware, --gpus, "
                             "--seq-len and --global-batch", field="PLANS")
        if plan is not None and given_on_command_line("rank", rank, 1):  # read nowhere: a plan string is one plan
            raise InputError("picks a plan of a plans.json, but --plan gives one plan; leave --rank out",
                             field="--rank")
        fields = None
        if plans is not None:
            path = plans_path(plans, plan_strings=False)
            source = str(path)
            document = read_plans(path)
            fields = plan_entry(document, rank, source)["plan"]
            inputs = document["inputs"]
            if inputs.get("workload") == "serve":
                reject_flags({"--hardware": hardware, "--gpus": gpus, "--gpus-per-node": gpus_per_node,
                              "--seq-len": seq_len, "--global-batch": global_batch, "--calibration": calibration},
                             f"a serving plans.json ({source} holds them)")
                reject_flags({"--framework": framework}, "a serving plans.json (it plans no training software)")
                _explain_serving(source, inputs, fields, rank=rank, model=model, json_out=json_out)
                return
            t = training_inputs_from_plans(inputs, source, model=model, hardware=hardware, gpus=gpus,
                                           gpus_per_node=gpus_per_node, seq_len=seq_len, global_batch=global_batch,
                                           calibration=calibration, framework=framework)
            headroom = memory_headroom_of(inputs, source)  # a plan fits as its search ranked it
        else:
            keys = {item.split("=", 1)[0].strip() for item in (plan or "").split(",")}
            if keys & {"weights", "kv", "max_batch", "mode"} or any(k.startswith(("prefill_", "decode_")) for k in keys):
                raise InputError("this is a serving plan; explain reads serving plans from a plans.json (`autotune "
                                 "search --workload serve ... --out DIR`, then `autotune explain DIR`), and `autotune "
                                 "predict --workload serve -p PLAN` estimates one", field="--plan")
            given = {"model": model, "hardware": hardware, "gpus": gpus, "seq_len": seq_len, "global_batch": global_batch}
            missing = [k for k, v in given.items() if v is None]
            if missing:
                raise InputError(f"missing {', '.join('--' + m.replace('_', '-') for m in missing)}", field="--plan")
            t = TrainingRequest(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, seq_len=seq_len,
                                global_batch=global_batch, calibration=calibration, framework=framework).build()
            headroom = 0.0  # a plan given on its own fits in the whole GPU, as predict says
        try:
            chosen = parse_plan(plan, t.cluster.n_gpus) if plan is not None else plan_from_fields(fields, t.cluster.n_gpus)
        except (TypeError, ValueError) as exc:
            if plan is not None:
                raise InputError(str(exc), field="--plan") from None
            overrides = [f for f, v in (("--gpus", gpus), ("--gpus-per-node", gpus_per_node)) if v is not None]
            if overrides:  # the file's plan, on a cluster the flags changed
                raise InputError(f"plan of rank {rank} cannot run on the cluster {' and '.join(overrides)} "
                                 f"{'give' if len(overrides) > 1 else 'gives'} "
                                 f"({exc}); leave {' and '.join(overrides)} out to explain it as searched",
                                 source=source, field=overrides[0]) from None
            raise InputError(f"plan of rank {rank} is malformed: {exc}; rerun `autotune search --out DIR`",
                             source=source, field="plans.plan") from None
        if plans is not None:
            _say_model_replaced(source, inputs, model, t.model)
            _say_inputs_replaced(source, inputs, t)
        found = explain(t.model, t.cluster, t.workload, chosen, framework=t.framework, memory_headroom=headroom)
        # a plan the framework cannot run is explained (the one-step changes show what would), but it is no plan:
        # the exit status says so, as predict's does
        reason = int(rejection_reasons(t.model, t.cluster, t.workload, PlanBatch.from_plans([chosen]),
                                       PERMISSIVE_RULES, framework=t.framework)[0])
        invalid = (reason_text(reason, chosen, t.framework, model=t.model, cluster=t.cluster, workload=t.workload)
                   if reason else "")
        if json_out:
            print_json(found.to_json())
            _say_invalid_explained(invalid, chosen)
            return
        hw = t.cluster.hardware
        stdout.print(f"[bold]{t.model.name}[/] on {t.cluster.n_gpus} x {hw.name} ({t.cluster.gpus_per_node} per node), "
                     f"sequence {t.workload.seq_len}, global batch {t.workload.global_batch}: {chosen.layout()} with "
                     f"{tables.settings_text(chosen)}; framework {t.framework.label}", highlight=False)
        times, memory = tables.breakdown_tables(found.estimate, hw.memory_gib)
        stdout.print(times)
        stdout.print(memory)
        stdout.print(f"[bold]What binds:[/] {found.binding}.", highlight=False, soft_wrap=True)
        stdout.print(tables.sensitivity_table(found))
        _say_invalid_explained(invalid, chosen)


def _architecture(spec: ModelSpec) -> dict:
    """A spec's fields less its name: the same model given as a bundled name or its config.json compares equal."""
    # what the estimate reads: a plans.json written before a spec stated its RoPE or router settings is the same model
    return {k: v for k, v in without_launch_only(model_to_mapping(spec)).items() if k != "name"}


def _say_model_replaced(source: str, inputs: dict, model: str | None, explained: ModelSpec) -> None:
    """A note when --model replaced the spec of a plans.json by another model: the plan is explained for a model
    its search did not rank (a what-if; emit refuses it, as its files would launch the other model).  The specs
    are compared, not their names: the searched model's own config.json (meta-llama-3-8b for llama3-8b) is the
    same model."""
    if model is None:
        return
    embedded = inputs.get("model_spec")
    searched = embedded.get("name") if isinstance(embedded, dict) else None
    searched = searched if isinstance(searched, str) else inputs.get("model")
    if not isinstance(searched, str):
        return
    try:
        same = _architecture(model_from_plans(inputs, source)) == _architecture(explained)
    except InputError:  # a file without a readable spec (an older one whose model is not bundled): by name
        same = searched == explained.name
    if not same:
        stderr.print(f"[yellow]note:[/] {escape(source)} was searched for {escape(searched)}; this explains its "
                     f"plan for {escape(explained.name)} (--model), a model that search did not rank.",
                     highlight=False, soft_wrap=True)


def _say_inputs_replaced(source: str, inputs: dict, t) -> None:
    """A note for each input a flag replaced of what a plans.json records (--seq-len, --global-batch, --gpus,
    --gpus-per-node, --hardware, --framework), compared as resolved (-H H100-SXM5-80GB or the profile's own file is
    the same GPU; megatron-lm@2025-09 the newest release): the plan is explained under inputs its search did not rank
    (a what-if, as --model is; emit refuses them)."""
    from ..inputs.framework import load_framework

    embedded = inputs.get("hardware_profile")
    searched_hw = embedded.get("name") if isinstance(embedded, dict) else inputs.get("hardware")
    try:
        recorded_fw = load_framework(inputs.get("framework"))
        # the newest release resolves to no date: the same traits are the same framework
        same_fw = (dataclasses.replace(recorded_fw, version="", date="")
                   == dataclasses.replace(t.framework, version="", date=""))
    except (InputError, ValueError, TypeError):
        same_fw = inputs.get("framework") in (None, t.framework.name)
    pairs = (("--hardware", t.cluster.hardware.name, searched_hw), ("--gpus", t.cluster.n_gpus, inputs.get("gpus")),
             ("--gpus-per-node", t.cluster.gpus_per_node, inputs.get("gpus_per_node")),
             ("--seq-len", t.workload.seq_len, inputs.get("seq_len")),
             ("--global-batch", t.workload.global_batch, inputs.get("global_batch")))
    changed = [f"{flag} {now} (searched: {then})" for flag, now, then in pairs
               if then is not None and str(now) != str(then)]
    if not same_fw:
        changed.append(f"--framework {t.framework.label} (searched: {inputs.get('framework')})")
    if changed:
        stderr.print(f"[yellow]note:[/] {escape(source)}'s plan is explained under {', '.join(changed)}, which its "
                     "search did not rank.", highlight=False, soft_wrap=True)


def _say_invalid_explained(why: str, plan) -> None:
    """An explained plan that cannot run: one line on stderr and exit 1 (nothing when ``why`` is empty)."""
    if why:
        stderr.print(f"[bold red]invalid plan:[/] {escape(why)} ({escape(plan.as_string())}); its numbers are the "
                     "cost model's, for a plan that cannot run; its one-step changes show which can.",
                     highlight=False, soft_wrap=True)
        raise typer.Exit(code=1)


def _explain_serving(source: str, inputs: dict, fields: Any, *, rank: int, model: str | None,
                     json_out: bool) -> None:
    """Explain a serve plan of a serving plans.json."""
    found_inputs = serving_inputs_from_plans(inputs, source, model=model)
    cluster, workload = found_inputs.cluster, found_inputs.workload
    try:
        chosen = serve_plan_from_fields(with_held_weights(fields, found_inputs.checkpoint), cluster.n_gpus)
    except (TypeError, ValueError) as exc:
        raise InputError(f"the plan is malformed ({exc}); rerun `autotune search --workload serve --out DIR`",
                         source=source, field="plans.plan") from None
    found_inputs.check_plan(chosen, source, rank)
    _say_model_replaced(source, inputs, model, found_inputs.model)
    hw = cluster.hardware
    params, engine = found_inputs.params, found_inputs.engine
    note = f"engine {engine}, checkpoint {found_inputs.checkpoint}; {inputs.get('parameters') or 'shipped parameters'}"
    if found_inputs.memory_fraction is not None:
        note += f"; memory flag {found_inputs.memory_fraction:g} (--memory-fraction)"
    workers = found_inputs.space.axes.get("workers")
    found = explain_serving(found_inputs.model, cluster, workload, chosen, params, engine=engine,
                            checkpoint=found_inputs.checkpoint, memory_fraction=found_inputs.memory_fraction,
                            searched_workers=max(workers) if workers else None)
    if json_out:
        print_json(found.to_json())
        return
    # the id the search was given (inputs.model), unless --model replaced the model
    named = model_label(inputs.get("model") if model is None else model, found_inputs.model.name)
    stdout.print(f"[bold]{escape(named)}[/] serving on {cluster.n_gpus} x {hw.name}: {chosen.layout()} "
                 f"({chosen.as_string()}); input {workload.input_len}, output {workload.output_len} tokens",
                 highlight=False)
    stdout.print(f"[dim]{escape(note)}[/]", highlight=False, soft_wrap=True)
    numbers, memory = tables.serving_estimate_tables(found.estimate, hw.memory_gib)
    stdout.print(numbers)
    stdout.print(memory)
    stdout.print(f"[bold]What binds:[/] {escape(found.binding)}.", highlight=False, soft_wrap=True)
    stdout.print(tables.serving_sensitivity_table(found, targets_set=workload.has_targets))
