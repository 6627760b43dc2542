"""``autotune emit``: launch configs for a plan, training (Megatron-LM, DeepSpeed, torchtitan, Slurm) or serving
(vLLM, SGLang).  The rendering is pure (``autotune/outputs/emit``); reading plans and writing files happen here."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.markup import escape

from ..errors import InputError
from ..inputs.framework import DEFAULT_FRAMEWORK
from ..inputs.hardware import load_hardware
from ..inputs.modelspec import load_model
from ..inputs.request import TrainingRequest, cluster_from_options, serve_workload, single_gpu_count
from ..outputs.emit import (
    EMITTERS,
    FORMATS,
    FRAMEWORKS,
    EmitContext,
    render,
)
from ..outputs.emit.formats import (
    FORMAT_FRAMEWORKS,
    FRAMEWORK_FORMATS,
    SERVING_FORMATS,
    context_from_plans,
    default_model_path,
    model_revision_note,
    other_release,
    runs_short,
    serving_files,
)
from ..outputs.files import (
    check_out_dir,
    plan_entry,
    plans_path,
    read_plans,
    refuse_overwrite,
    write_files,
)
from ..search.api import predict_serve_plan, serving_checkpoint, serving_checkpoint_note, serving_memory_fraction
from ..search.plans_file import framework_from_plans, serving_inputs_from_plans
from ..search.serving import annotate_checkpoint
from ..serving.checkpoint import with_held_weights
from ..serving.estimate import estimate_serving
from ..serving.plan import ServePlanBatch, parse_serve_fields, serve_plan_from_fields
from ..serving.space import IMPOSSIBLE as SERVE_IMPOSSIBLE
from ..serving.space import REASONS as SERVE_REASONS
from ..serving.space import reason_text as serve_reason_text
from ..serving.space import rejection_reasons as serve_rejection_reasons
from ..training.estimate import estimate_training
from ..training.plan import PlanBatch, parse_plan
from ..training.space import plan_violation
from .app import (
    MoeCapacityFactor,
    MoeImbalance,
    Calibration,
    CheckpointOpt,
    Concurrency,
    MemoryFractionOpt,
    Gpus,
    GpusPerNode,
    InputLen,
    JsonOut,
    Nodes,
    OutputLen,
    RequestRate,
    Tokens,
    TpotMs,
    TtftMs,
    app,
    given_on_command_line,
    path_option,
    print_json,
    reject_flags,
    stderr,
    stdout,
    user_errors,
)


@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune emit runs/70b/plans.json --format megatron --out runs/70b/launch\n\n"
        "    autotune emit runs/70b --rank 2 --format slurm --framework torchtitan --out runs/70b/launch\n\n"
        "    autotune emit \"tp=4,cp=16,zero=3\" -m llama3-70b -H h100-sxm5-80gb --gpus 128 -s 131072 -b 32 "
        "--format torchtitan\n\n"
        "    autotune emit tp=4,weights=fp8,kv=fp8,max_batch=64 --format vllm -m llama3-70b -H h100-sxm5-80gb "
        "--gpus 8 --input-len 2048 --output-len 256\n\n"
        "    autotune emit runs/70b-serve --rank 2 --format vllm --model-path /models/Llama-3.1-70B "
        "--out runs/70b-serve/launch   (a serving plans.json; its plans are ranked for its search's --engine)\n\n"
        "Targets: " + "; ".join(f"{name}: {em.release}" for name, em in FRAMEWORKS.items())
        + ". See docs/launch-configs.md."
    )
)
def emit(
    plan_source: Annotated[Optional[str], typer.Argument(
        metavar="PLAN", help="A plans.json from `search --out` (or its folder), or a plan string like tp=8,pp=4.")] = None,
    format: Annotated[str, typer.Option("--format", "-f", help="megatron | deepspeed | torchtitan | slurm; serving: vllm | sglang.")] = "megatron",
    plan: Annotated[Optional[str], typer.Option("--plan", "-p", help="A plan string (instead of PLAN).")] = None,
    rank: Annotated[int, typer.Option("--rank", "-r", help="Which plan of a plans.json (1 = the best).")] = 1,
    framework: Annotated[Optional[str], typer.Option("--framework", help="Training software NAME[@VERSION] as for `search` (megatron-lm, deepspeed, torchtitan, ...): what a Slurm script runs, and what the plan's estimate assumes [default: the format's own; slurm: megatron-lm].")] = None,
    model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model spec (needed with a plan string; a plans.json holds its own).")] = None,
    hardware: Annotated[Optional[str], typer.Option("--hardware", "-H", help="Hardware profile (needed with a plan string).")] = None,
    gpus: Gpus = None,
    gpus_per_node: GpusPerNode = None,
    nodes: Nodes = None,
    seq_len: Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Sequence length (needed with a plan string; serving: prompt + output tokens).")] = None,
    global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-b", help="Global batch in sequences (needed with a plan string).")] = None,
    tokens: Tokens = None,
    calibration: Calibration = None,
    moe_imbalance: MoeImbalance = None,
    moe_capacity_factor: MoeCapacityFactor = None,
    data_path: Annotated[Optional[str], typer.Option("--data-path", help="Training data (Megatron: --data-path prefix; torchtitan: dataset path) [default: mock data].")] = None,
    tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="Tokenizer: a Hugging Face name or folder.")] = None,
    out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the files into this folder [default: print them].", parser=path_option, metavar="<path>")] = None,
    force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist in --out.")] = False,
    json_out: JsonOut = False,
    input_len: InputLen = None,
    output_len: OutputLen = None,
    checkpoint: CheckpointOpt = None,
    concurrency: Concurrency = None,
    request_rate: RequestRate = None,
    ttft_ms: TtftMs = None,
    tpot_ms: TpotMs = None,
    memory_fraction: MemoryFractionOpt = None,
    model_path: Annotated[Optional[str], typer.Option("--model-path", help="Serving: the weights the script loads (a Hugging Face name or folder) [default: the model name].")] = None,
    allow_no_fit: Annotated[bool, typer.Option("--allow-no-fit", help="Write the files of a plan the cost model predicts does not fit in memory or cannot run on the GPU (default: refuse, saying why; a serving batch limit above what the KV cache holds is written with a warning).")] = False,
) -> None:
    """Write the launch config of a plan for Megatron-LM, DeepSpeed, torchtitan, Slurm, vLLM or SGLang."""
    with user_errors():
        format = format.strip().lower()  # as --engine reads VLLM
        if plan_source is not None and not plan_source.strip():
            raise InputError("must name a plans.json (or its folder) or a plan string like tp=8,pp=4, but got an "
                             "empty one (PLAN='')", field="PLAN")
        if plan_source is not None and plan is not None:
            raise InputError("give the plan once: as PLAN or as --plan", field="--plan")
        if given_on_command_line("rank", rank, 1) and (plan is not None or (plan_source is not None
                                                                             and plans_path(plan_source) is None)):
            raise InputError("picks a plan of a plans.json, but a plan string is one plan; leave --rank out",
                             field="--rank")
        if rank < 1:
            raise InputError(f"must be >= 1 (1 = the best plan of a plans.json), but got {rank}", field="--rank")
        gpus = single_gpu_count(gpus)
        if gpus_per_node is not None and gpus_per_node < 1:  # not read as "the profile's" (0 or None alike below)
            raise InputError(f"must be >= 1, but got {gpus_per_node}", field="--gpus-per-node")
        for flag, value in (("--data-path", data_path), ("--tokenizer", tokenizer), ("--model-path", model_path)):
            if value is not None and not value.strip():  # a script would pass '' on: the run fails at launch
                raise InputError(f"must name a path or a Hugging Face name, but got {value!r}; leave {flag} out "
                                 "for the default", field=flag)
            # the script passes it on as an argument: a leading '-' is read as an option of the engine or the
            # trainer (--model-path --trust-remote-code), a line break or other control character splits the line
            if value is not None and value.lstrip().startswith("-"):
                raise InputError(f"must name a path or a Hugging Face name, but got {value!r}, which the script "
                                 f"would pass on as an option; write ./{value.strip()} for a folder of that name",
                                 field=flag)
            if value is not None and any(ord(c) < 32 or ord(c) == 127 for c in value):
                raise InputError(f"must name a path or a Hugging Face name without a control character (a line "
                                 f"break, a tab), but got {value!r}", field=flag)
        if out is not None:  # before any work: a file, an unwritable place
            check_out_dir(out, force, must_be_empty=False)
        # The notes of the plan wait until its files can be written: a refusal (--out would be overwritten, a
        # bad plan) is one line on stderr, not notes about files that were never written and then the error.
        with stderr.capture() as notes:
            reestimated = ""  # a plans.json's plan estimated again for the framework the files run: why
            if format in SERVING_FORMATS:
                for flag, value in (("--moe-imbalance", moe_imbalance), ("--moe-capacity-factor", moe_capacity_factor)):
                    if value is not None:
                        raise InputError(f"is a training setting; a {format} plan does not take it", field=flag)
                # Refused, not ignored: a training option on a serving emit would otherwise vanish without a word.
                reject_flags({"--global-batch": global_batch, "--tokens": tokens,
                              "--framework": framework, "--data-path": data_path, "--tokenizer": tokenizer},
                             f"a serving emit (--format {format}: training only)")
                if calibration is not None:
                    raise InputError(f"does not apply to a serving emit (--format {format}): the script quotes the "
                                     "engine's shipped parameters, or those a serving plans.json records; leave it out",
                                     field="--calibration")
                if seq_len is not None and input_len is not None and output_len is not None:
                    reject_flags({"--seq-len": seq_len}, "a serving emit given --input-len and --output-len (the request "
                                                         "is their sum)")
                files, estimate = _serving(format, plan_source, plan, rank, model, hardware, gpus, seq_len,
                                           input_len=input_len, output_len=output_len, gpus_per_node=gpus_per_node,
                                           nodes=nodes, checkpoint=checkpoint, model_path=model_path,
                                           memory_fraction=serving_memory_fraction(memory_fraction),
                                           load=Load(concurrency, request_rate, ttft_ms, tpot_ms))
            else:
                if format not in EMITTERS:
                    raise InputError(f"unknown format {format!r}; choose from {', '.join(FORMATS + SERVING_FORMATS)}",
                                     field="--format")
                reject_flags({"--input-len": input_len, "--output-len": output_len, "--checkpoint": checkpoint,
                              "--model-path": model_path, "--memory-fraction": memory_fraction,
                              "--concurrency": concurrency, "--request-rate": request_rate, "--ttft-ms": ttft_ms,
                              "--tpot-ms": tpot_ms},
                             f"a training launch config (--format {format}; serving: --format vllm or sglang)")
                given = TrainingRequest(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                                        seq_len=seq_len, global_batch=global_batch, tokens=tokens, calibration=calibration,
                                        moe_imbalance=moe_imbalance, moe_capacity_factor=moe_capacity_factor)
                software, runs = _software(framework, format)
                given = dataclasses.replace(given, framework=software)
                options = dict(data_path=data_path, tokenizer=tokenizer, framework=runs)
                context, reestimated = _context(plan_source, plan, rank, given, options,
                                                framework_given=framework is not None)
                if reestimated:
                    stderr.print(f"[yellow]note:[/] {reestimated}", soft_wrap=True, highlight=False)
                files, estimate = render(format, context), context.estimate
            if isinstance(estimate, dict) and estimate.get("fits") is False and not allow_no_fit \
                    and not runs_short(format, estimate):
                # a launch that runs out of memory costs the user a queue wait and a crash: refused, with the way
                # out, unless they know better (--allow-no-fit); the figures, and why they differ from the plans.json's
                # where the plan was estimated again for the framework the files run (the refusal is the one line
                # printed, so the note it would have followed goes into it)
                reason = _no_fit_reason(format, estimate)
                if reestimated:
                    reason += f"; {reestimated}"
                raise InputError(f"the cost model predicts this plan does not fit "
                                 f"({reason}); emit another plan (--rank "
                                 "of a plans.json, a smaller batch), or pass --allow-no-fit to write it anyway",
                                 field="--plan" if plan is not None or plans_path(plan_source or "") is None
                                 else "--rank")
            if out is not None:
                refuse_overwrite(out, files, force)
        if notes.get():
            stderr.file.write(notes.get())
        if out is not None:
            written = write_files(out, files, force)
            if json_out:
                print_json({"format": format, "written": [str(p) for p in written]})
            else:
                stdout.print("Wrote " + ", ".join(str(p) for p in written), highlight=False, soft_wrap=True)
        elif json_out:
            print_json({"format": format, "files": files})
        else:
            for name, text in files.items():
                print(f"# ===== {name} =====")
                print(text, end="")
        if isinstance(estimate, dict) and estimate.get("fits") is False:
            stderr.print(f"[bold yellow]warning:[/] the cost model predicts this plan does not fit "
                         f"({_no_fit_reason(format, estimate)}).", soft_wrap=True)


def _no_fit_reason(format: str, estimate: dict) -> str:
    """Why an estimate does not fit, with a training plan's memory against the GPU's (``83.0 of 79.1 GiB per GPU``)."""
    reason = str(estimate.get("infeasible_reason", "out of memory"))
    memory, headroom = estimate.get("memory_gib_per_gpu"), estimate.get("memory_headroom_gib")
    if (format not in SERVING_FORMATS and reason == "out of memory" and isinstance(memory, (int, float))
            and isinstance(headroom, (int, float))):
        reason += f": {memory:.1f} of {round(memory + headroom, 2):g} GiB per GPU"
    return reason


# Names the launch formats go by, accepted for the framework they run.
_ALIASES = {"megatron": "megatron-lm"}


def _software(framework: str | None, format: str) -> tuple[str, str]:
    """``(framework profile NAME[@VERSION], emitter it runs)`` for ``--framework`` and ``--format``."""
    spec = _ALIASES.get(framework, framework) if framework else None
    name = spec.partition("@")[0] if spec else None
    if format == "slurm":
        runs = FRAMEWORK_FORMATS.get(name or "megatron-lm")
        if runs is None:
            raise InputError(f"a Slurm script can run {', '.join(sorted(FRAMEWORK_FORMATS))}, but got {framework!r}",
                             field="--framework")
        return spec or FORMAT_FRAMEWORKS[runs], runs
    if name is not None and FRAMEWORK_FORMATS.get(name) != format:
        raise InputError(f"--format {format} writes {FORMAT_FRAMEWORKS[format]} launch configs, but --framework is "
                         f"{framework!r}; drop --framework or choose the format of that framework", field="--framework")
    return spec or FORMAT_FRAMEWORKS[format], format


def _context(plan_source: str | None, plan_text: str | None, rank: int, given: TrainingRequest,
             options: dict[str, Any], *, framework_given: bool = False) -> tuple[EmitContext, str]:
    """The training plan to emit, from a plans.json or a plan string, and the note to print when a plans.json's plan
    was estimated again for the framework the files run ("" otherwise).

    ``given`` holds the training flags as given: any may be None here, and a plan string needs --model,
    --hardware, --seq-len and --global-batch.
    """
    if plan_source is None and plan_text is None:
        raise InputError("give a plans.json (from `autotune search --out`) or a plan string such as tp=8,pp=4",
                         field="PLAN")
    path = plans_path(plan_source) if plan_source is not None else None
    if path is not None:
        document = read_plans(path)
        for flag, value in (("--hardware", given.hardware), ("--gpus", given.gpus),
                            ("--gpus-per-node", given.gpus_per_node), ("--nodes", given.nodes),
                            ("--seq-len", given.seq_len), ("--global-batch", given.global_batch),
                            ("--tokens", given.tokens), ("--calibration", given.calibration),
                            ("--moe-imbalance", given.moe_imbalance),
                            ("--moe-capacity-factor", given.moe_capacity_factor)):
            if value is not None:
                raise InputError(f"comes from {path}; leave it out, or emit a plan string instead", field=flag)
        if document["inputs"].get("workload") == "serve":
            engine = document["inputs"].get("engine")
            if isinstance(engine, str) and engine.startswith("trtllm"):
                raise InputError("is a serving plans.json searched for TensorRT-LLM, for which autotune writes no "
                                 "launch files; --format vllm or --format sglang re-checks the plan for that engine "
                                 "(or search again with --engine vllm or sglang)", source=str(path))
            raise InputError("is a serving plans.json; emit it with --format vllm or --format sglang", source=str(path))
        spec = _model_override(given.model, document["inputs"], path)
        framework, note = _files_framework(document["inputs"].get("framework"), given.framework, options["framework"],
                                           framework_given, path)
        context = context_from_plans(document, rank, model=spec, source=str(path), software=framework,
                                     software_field="--framework" if framework_given else "--format", **options)
        return context, note
    return _context_from_string(plan_text or plan_source, given, options), ""


def _model_override(model: str | None, inputs: dict, path: Path):
    """The spec ``--model`` gives for a plans.json, or None to use the file's.

    A plans.json that embeds its spec holds the model its plans were searched for: another one would re-plan a
    different model without a word, so ``--model`` is refused like ``--hardware``. An older file that embeds no
    spec takes ``--model`` for the spec it names (the search's, so the name must match)."""
    if model is None:
        return None
    if inputs.get("model_spec") is not None:
        raise InputError(f"comes from {path} (model {inputs.get('model')!r}); leave it out, or emit a plan string "
                         "instead", field="--model")
    spec = load_model(model)
    searched = inputs.get("model")
    try:  # the search's -m may be a bundled name, a spec file or an HF config.json (its spec has its own name)
        searched_name = load_model(searched).name if isinstance(searched, str) else None
    except InputError:
        searched_name = None  # the file it named is gone: the spec given now is the only one there is
    if searched_name is not None and spec.name != searched_name:
        raise InputError(f"{path} was searched for model {searched!r} ({searched_name}), but --model gives "
                         f"{spec.name!r}; give the spec that search used", field="--model")
    return spec


def _files_framework(searched: Any, software: str, runs: str, given: bool, path: Path) -> tuple[str | None, str]:
    """The framework whose estimate the emitted files quote -- the one they run -- and a note when that is not
    the framework the plans.json was searched for.

    ``software`` is ``--framework`` (``given``) or the format's own framework, ``runs`` the emitter the files
    use. A plans.json keeps its framework, version included, when its files run it (a Megatron-DeepSpeed
    search emitted with ``--format deepspeed``; ``--framework megatron-lm`` without a version on a
    ``megatron-lm@2023-06`` search); otherwise (``--format megatron`` on a Megatron-Bridge search, ``--format
    slurm --framework torchtitan``, another version) the plan is estimated again for what the files run, as a
    plan string with that format is.
    """
    if searched is not None and not isinstance(searched, str):
        return None, ""  # the file's own value, which reading the file refuses with its field
    searched = searched or DEFAULT_FRAMEWORK
    name, wanted = searched.partition("@")[0], software.partition("@")[0]
    if not given and FRAMEWORK_FORMATS.get(name) == runs:
        return None, ""
    if given and wanted == name and ("@" not in software or software == searched):
        return None, ""
    framework_from_plans(searched, str(path))  # replaced, but still one autotune knows
    return software, (f"{path} was searched for {searched}; the files run {software}, so the estimate they quote "
                      f"is {software}'s")


def _context_from_string(plan_text: str, given: TrainingRequest, options: dict[str, Any]) -> EmitContext:
    for flag, value in (("--model", given.model), ("--hardware", given.hardware), ("--seq-len", given.seq_len),
                        ("--global-batch", given.global_batch)):
        if value is None:
            raise InputError("is needed with a plan string (or give a plans.json from `autotune search --out`)",
                             field=flag)
    inputs = given.build()
    try:
        chosen = parse_plan(plan_text, inputs.cluster.n_gpus)
    except ValueError as exc:
        raise InputError(str(exc), field="--plan") from None
    why = plan_violation(inputs.model, inputs.cluster, inputs.workload, chosen, inputs.framework)
    if why:
        raise InputError(f"this plan cannot run: {why}; fix the plan (see `autotune predict`)", field="--plan")
    batch = PlanBatch.from_plans([chosen])
    estimate = estimate_training(inputs.model, inputs.cluster, inputs.workload, batch, inputs.framework).row(0)
    return EmitContext(
        plan=chosen, model=inputs.model, hardware=inputs.cluster.hardware.name, hardware_profile=inputs.cluster.hardware,
        gpus_per_node=inputs.cluster.gpus_per_node, seq_len=inputs.workload.seq_len,
        global_batch=inputs.workload.global_batch, estimate=estimate, tokens=given.tokens,
        moe_capacity_factor=inputs.workload.moe_capacity_factor, **options,
    )


@dataclasses.dataclass(frozen=True)
class Load:
    """A serving emit's load and latency targets (--concurrency or --request-rate, --ttft-ms, --tpot-ms)."""

    concurrency: int | None = None
    request_rate: float | None = None
    ttft_ms: float | None = None
    tpot_ms: float | None = None


def _serving(format: str, plan_source: str | None, plan_text: str | None, rank: int, model: str | None,
             hardware: str | None, gpus: int | None, seq_len: int | None, *, input_len: int | None = None,
             output_len: int | None = None, gpus_per_node: int | None = None, nodes: int | None = None,
             checkpoint: str | None = None, model_path: str | None = None,
             memory_fraction: float | None = None, load: "Load | None" = None) -> tuple[dict[str, str], Any]:
    """The launch files of a serve plan: from a serving plans.json, or a plan string with --model,
    --hardware, --gpus (or --nodes, as search and predict read them) and the request shape (--input-len and --output-len, or --seq-len: prompt + output).
    ``memory_fraction`` (--memory-fraction) overrides the engine memory flag a plans.json records; ``load`` the
    load and targets a plan string's files quote their figures at (a plans.json holds its search's)."""
    load = load or Load()
    input_len_given, output_len_given = input_len, output_len
    source = plan_source or plan_text
    if source is None:
        raise InputError("give a serving plans.json (search --workload serve --out DIR) or a plan string such as "
                         "tp=4,weights=fp8,kv=fp8,max_batch=64", field="PLAN")
    path = plans_path(source) if plan_text is None else None
    estimate = None
    release = None  # the engine release a plans.json was searched for
    searched_load = None  # its workload (load and targets), for a plan re-estimated on another engine
    if path is not None:
        document = read_plans(path)
        inputs = document["inputs"]
        if inputs.get("workload") != "serve":
            raise InputError("is not a serving plans.json (inputs.workload is not serve); rerun "
                             "`autotune search --workload serve --out DIR`", source=str(path))
        # an older plans.json records no node size: --gpus-per-node then gives it (the profile's otherwise)
        recorded_gpn = gpus_per_node if inputs.get("gpus_per_node") is not None else None
        for flag, value in (("--hardware", hardware), ("--gpus", gpus), ("--gpus-per-node", recorded_gpn),
                            ("--nodes", nodes), ("--seq-len", seq_len), ("--input-len", input_len), ("--output-len", output_len),
                            ("--concurrency", load.concurrency), ("--request-rate", load.request_rate),
                            ("--ttft-ms", load.ttft_ms), ("--tpot-ms", load.tpot_ms)):
            if value is not None:
                raise InputError(f"comes from {path}; leave it out, or emit a plan string instead", field=flag)
        engine_limit = False  # a searched plan states its max_batch
        entry = plan_entry(document, rank, str(path))
        served = serving_inputs_from_plans(inputs, str(path), model=_model_override(model, inputs, path))
        release = served.release
        searched_load = served.workload
        spec, hw = served.model, served.cluster.hardware
        input_len, output_len = served.workload.input_len, served.workload.output_len
        gpn = gpus_per_node or served.cluster.gpus_per_node
        ckpt = served.checkpoint if checkpoint is None else serving_checkpoint(spec.name, checkpoint, spec)
        try:
            chosen = serve_plan_from_fields(with_held_weights(entry["plan"], ckpt), served.cluster.n_gpus)
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"plan of rank {rank} is malformed: {exc}", source=str(path), field="plans.plan") from None
        served.check_plan(chosen, str(path), rank)
        # a file an older autotune wrote, or a hand edit, may hold a plan no engine launches (heads not divisible by
        # tp, an expert split over a width it does not divide): refused as a plan string is
        code = int(serve_rejection_reasons(spec, served.cluster, ServePlanBatch.from_plans([chosen]), frozenset({"dp"}),
                                           engine=format, checkpoint=ckpt)[0])
        if SERVE_REASONS[code] in SERVE_IMPOSSIBLE:
            raise InputError(f"plan of rank {rank} cannot run: {serve_reason_text(code, chosen, spec)}; rerun `autotune search "
                             "--workload serve --out DIR`, or emit another --rank", source=str(path),
                             field="plans.plan")
        if memory_fraction is None and served.engine == format:  # a value of the searched engine's flag
            memory_fraction = served.memory_fraction
        if served.engine == format:
            # Estimated again from the embedded inputs and parameters (the script's comments quote it), not copied.
            estimate = annotate_checkpoint(
                estimate_serving(spec, served.cluster, served.workload, ServePlanBatch.from_plans([chosen]),
                                 served.params, engine=served.engine, memory_fraction=memory_fraction).row(0),
                chosen, ckpt, served.engine, spec.is_moe, fp4_cores=served.cluster.hardware.supports("fp4"))
        else:
            kept = ("" if served.memory_fraction is None or memory_fraction is not None else
                    f" (its recorded memory fraction {served.memory_fraction:g} is a {served.engine} value: {format} "
                    "keeps its default; --memory-fraction sets one)")
            stderr.print(f"[yellow]note:[/] the plan was searched for {served.engine}; its batch is re-checked "
                         f"against {format}'s memory budget{kept}.", highlight=False, soft_wrap=True)
            recorded = inputs.get("parameters")
            if isinstance(recorded, str) and "overlay" in recorded:
                # the file records the overlay's parameters for the searched engine only
                stderr.print(f"[yellow]note:[/] its {format} figures use the shipped {format} parameters: the search's "
                             f"calibration ({recorded}) is recorded for {served.engine} only; `autotune search ... "
                             f"--calibration FILE --emit {format}` quotes {format} with the overlay's.",
                             highlight=False, soft_wrap=True)
    else:
        if (model is None or hardware is None or (gpus is None and nodes is None)
                or (seq_len is None and (input_len is None or output_len is None))):
            raise InputError("a plan string needs --model, --hardware, --gpus (or --nodes) and --input-len/--output-len "
                             "(or --seq-len, prompt + output tokens)", field="--plan")
        spec = load_model(model)
        hw = load_hardware(hardware)
        gpn = gpus_per_node or hw.gpus_per_node
        # the cluster as search and predict read it: the flag at fault is named (GPUs that fill no whole node)
        cluster = cluster_from_options(hw, gpus, gpus_per_node, nodes)
        try:
            fields = parse_serve_fields(source)
        except ValueError as exc:
            raise InputError(str(exc), field="--plan") from None
        # as predict reads it: no max_batch is the engine's default limit, no weights the checkpoint's
        ckpt = serving_checkpoint(model, checkpoint, spec)
        note = serving_checkpoint_note(model, checkpoint)
        if note:
            stderr.print(f"[yellow]note:[/] {escape(note)}.", highlight=False, soft_wrap=True)
        chosen, engine_limit = predict_serve_plan(fields, cluster.n_gpus, format, hw.memory_gib, checkpoint=ckpt,
                                                      gpu=hw.name)
        code = int(serve_rejection_reasons(spec, cluster, ServePlanBatch.from_plans([chosen]), frozenset({"dp"}),
                                           engine=format, checkpoint=ckpt)[0])
        # Refuse what no engine can launch; a search-space preference (tp within one node) stays the user's call.
        if SERVE_REASONS[code] in SERVE_IMPOSSIBLE:
            raise InputError(f"this plan cannot run: {serve_reason_text(code, chosen, spec)}", field="--plan")
        if input_len is None or output_len is None:
            if seq_len is None or seq_len < 2:
                raise InputError(f"must be >= 2 (prompt + output tokens), but got {seq_len}", field="--seq-len")
            # -s is prompt + output: the length given is taken from it, so the two always add up to -s.
            given_flag, given_len = ("--input-len", input_len) if input_len is not None else ("--output-len", output_len)
            if given_len is not None and given_len >= seq_len:
                raise InputError(f"--seq-len must exceed {given_flag} (it is prompt + output tokens), but got "
                                 f"(seq_len={seq_len}, {given_flag[2:].replace('-', '_')}={given_len})", field="--seq-len")
            if input_len is None and output_len is None:
                output_len = min(256, seq_len // 2)
            if output_len is None:
                output_len = seq_len - input_len
            if input_len is None:
                input_len = seq_len - output_len
        # the load and targets the files quote their figures at, as predict reads them (no load: the engine full)
        searched_load = serve_workload(input_len, output_len, load.ttft_ms, load.tpot_ms, load.concurrency,
                                       load.request_rate)
    window = spec.max_seq_len
    if window and input_len + output_len > window:
        # the engines refuse --max-model-len / --context-length beyond the model's window: no script to write
        flag = "--seq-len" if path is None and seq_len is not None and (input_len_given is None
                                                                        or output_len_given is None) else "--input-len"
        raise InputError(f"input + output ({input_len + output_len:,} tokens) exceed {spec.name}'s context window of "
                         f"{window:,} tokens, so the engine would refuse the launch; shorten {flag}"
                         f"{'' if flag == '--seq-len' else '/--output-len'}", field=flag)
    given_name = model if path is None else (model or inputs.get("model"))
    given_name = given_name if isinstance(given_name, str) else None
    revision_note = None if model_path else model_revision_note(given_name)
    if revision_note:
        stderr.print(f"[yellow]note:[/] {escape(revision_note)}.", highlight=False, soft_wrap=True)
    # an id whose weights are not the checkpoint's: the scripts ask for MODEL rather than load the id's
    # (or the plan's weights need another checkpoint than the id holds)
    model_path = model_path or default_model_path(given_name, ckpt, chosen.weights, format, is_moe=spec.is_moe,
                                                  fp4_cores=hw.supports("fp4"))
    files, mine = serving_files(format, chosen, spec, hw, input_len, output_len, estimate, model_path,
                                gpus_per_node=gpn, checkpoint=ckpt, engine_batch_limit=engine_limit,
                                memory_fraction=memory_fraction, release=release, workload=searched_load,
                                searched=path is not None, model_name=given_name)
    misses = (estimate or mine).get("misses")
    if misses:
        whose = "the search's" if path is not None else "the"  # a plan string's are --ttft-ms / --tpot-ms
        stderr.print(f"[yellow]note:[/] this plan misses {whose} targets on {format} ({escape(misses)}); the "
                     "launch file says so.", highlight=False, soft_wrap=True)
    other = other_release(format, release)
    if other:
        stderr.print(f"[yellow]note:[/] {escape(other.removeprefix('WARNING: '))}.", highlight=False, soft_wrap=True)
    return files, mine
