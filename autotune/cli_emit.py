"""``autotune emit``: launch configs for a plan.  The effects live here: reading plans, writing files.

The rendering itself is pure (``autotune/emit``).  ``register(app)`` adds the
command to the CLI; ``emit_for_search`` and ``expressible_mask`` are what
``autotune search --emit FORMATS`` calls to write the winner's configs and to
restrict the search to plans the formats can express.
"""

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Optional

import numpy as np
import typer

from .emit import DEFAULT_FRAMEWORK, EMITTERS, FORMATS, FRAMEWORKS, EmitContext, get_emitter, render
from .errors import InputError
from .inputs import TrainingRequest
from .modelspec import ModelSpec, load_model
from .plan import PlanBatch, parse_plan, plan_from_fields

EXECUTABLE_SUFFIXES = (".sh", ".sbatch")


# --- pure helpers ---------------------------------------------------------------------------

# The framework profile each launch-config format targets (its newest profiled behaviour).
FORMAT_FRAMEWORKS = {"megatron": "megatron-lm", "deepspeed": "deepspeed", "torchtitan": "torchtitan"}


def framework_for_formats(formats: list[str]) -> str:
    """The framework a search for these --emit formats plans for: the first format's (slurm: the one it runs)."""
    for name in formats:
        base, _, runs = name.partition(":")
        target = FORMAT_FRAMEWORKS.get(base) or FORMAT_FRAMEWORKS.get(runs)
        if target:
            return target
    from .framework import DEFAULT_FRAMEWORK as default

    return default


def parse_formats(text: str | list[str]) -> list[str]:
    """``"megatron,slurm"`` -> ``["megatron", "slurm:megatron"]``.

    ``slurm`` runs the first framework named beside it (else Megatron-LM); write
    ``slurm:torchtitan`` to choose explicitly.
    """
    items = text.split(",") if isinstance(text, str) else [p for item in text for p in item.split(",")]
    names = [item.strip() for item in items if item.strip()]
    if not names:
        raise InputError(f"name at least one format: {', '.join(FORMATS)}", field="--emit")
    frameworks = [n for n in names if n in FRAMEWORKS]
    out: list[str] = []
    for name in names:
        base, _, framework = name.partition(":")
        if base not in EMITTERS:
            raise InputError(f"unknown format {base!r}; choose from {', '.join(FORMATS)} (slurm:FRAMEWORK picks the "
                             f"framework a Slurm script runs)", field="--emit")
        if base == "slurm":
            framework = framework or (frameworks[0] if frameworks else DEFAULT_FRAMEWORK)
            if framework not in FRAMEWORKS:
                raise InputError(f"unknown framework {framework!r} after slurm:; choose from {', '.join(FRAMEWORKS)}",
                                 field="--emit")
            name = f"slurm:{framework}"
        elif framework:
            raise InputError(f"only slurm takes a framework (slurm:FRAMEWORK), but got {name!r}", field="--emit")
        if name not in out:
            out.append(name)
    slurm = [n for n in out if n.startswith("slurm:")]
    if len(slurm) > 1:
        raise InputError(f"one Slurm script per folder (launch.sbatch), but got {', '.join(slurm)}; "
                         "emit the others into another --out", field="--emit")
    return out


def _split(spec: str) -> tuple[str, str | None]:
    base, _, framework = spec.partition(":")
    return base, (framework or None)


def expressible_mask(format: str, plans: PlanBatch, model: ModelSpec, workload=None) -> np.ndarray:
    """True for each plan of the batch that ``format`` (e.g. ``deepspeed``, ``slurm:torchtitan``) can express.

    With ``workload``, limits of the workload count too (torchtitan's longest sequence).
    """
    base, framework = _split(format)
    seq_len = workload.seq_len if workload is not None else None
    return get_emitter(base, framework).expressible(plans, model, seq_len)


def check_formats(formats: list[str], model: ModelSpec, workload=None) -> None:
    """Refuse, before a search, formats that can express no plan of this model or workload."""
    for spec in parse_formats(formats):
        base, framework = _split(spec)
        emitter = get_emitter(base, framework)
        reasons = emitter.model_reasons(model, workload.seq_len if workload is not None else None)
        if reasons:
            raise InputError(f"{spec} cannot express any plan here: " + "; ".join(reasons), field="--emit")


def render_formats(formats: list[str], context: EmitContext) -> dict[str, str]:
    """The files of several formats for one plan, merged by name (a Slurm script shares its framework's files)."""
    files: dict[str, str] = {}
    for spec in parse_formats(formats):
        base, framework = _split(spec)
        ctx = context if framework is None else _with_framework(context, framework)
        for name, text in render(base, ctx).items():
            if files.get(name, text) != text:
                raise InputError(f"two formats would write different {name}; emit them into separate --out folders",
                                 field="--emit")
            files[name] = text
    return files


def _with_framework(context: EmitContext, framework: str) -> EmitContext:
    from dataclasses import replace

    return replace(context, framework=framework)


def context_from_plans(document: Mapping[str, Any], rank: int, *, model: ModelSpec | None = None,
                       source: str = "plans.json", **options: Any) -> EmitContext:
    """The plan of rank ``rank`` in a ``plans.json`` document, with its inputs and estimate."""
    inputs = document.get("inputs")
    entries = document.get("plans")
    if not isinstance(inputs, dict) or not isinstance(entries, list):
        raise InputError("is not a plans.json from `autotune search --out` (it needs 'inputs' and 'plans')", source=source)
    for key in ("model", "hardware", "gpus", "gpus_per_node", "seq_len", "global_batch"):
        if key not in inputs:
            raise InputError(f"inputs lack '{key}'; rerun `autotune search --out`", source=source, field=f"inputs.{key}")
    ranks = [entry.get("rank") for entry in entries]
    if rank not in ranks:
        listed = f"ranks {min(ranks)}..{max(ranks)}" if ranks else "no plans"
        raise InputError(f"has no plan of rank {rank} (it holds {listed}); choose --rank from those", source=source,
                         field="--rank")
    entry = entries[ranks.index(rank)]
    if model is None:
        try:
            model = load_model(str(inputs["model"]))
        except InputError as exc:
            raise InputError(f"model {inputs['model']!r} named in {source} cannot be loaded ({exc}); pass --model with "
                             "the spec the search used", field="--model") from None
    elif model.name != inputs["model"]:
        raise InputError(f"{source} was searched for model {inputs['model']!r}, but --model gives {model.name!r}",
                         field="--model")
    try:
        plan = plan_from_fields(entry["plan"], int(inputs["gpus"]))
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"plan of rank {rank} is malformed: {exc}", source=source, field="plans.plan") from None
    return EmitContext(
        plan=plan, model=model, hardware=str(inputs["hardware"]), gpus_per_node=int(inputs["gpus_per_node"]),
        seq_len=int(inputs["seq_len"]), global_batch=int(inputs["global_batch"]), estimate=entry.get("estimate"),
        tokens=inputs.get("tokens"), **options,
    )


def write_files(out: Path, files: Mapping[str, str], force: bool) -> list[Path]:
    """Write ``files`` into ``out``; refuse to overwrite an existing file unless ``force``."""
    if out.exists() and not out.is_dir():
        raise InputError("exists and is not a folder; choose another --out", source=str(out))
    paths = [out / name for name in files]
    existing = [p.name for p in paths if p.exists()]
    if existing and not force:
        raise InputError(f"would overwrite {', '.join(existing)}; pass --force, or choose another --out", source=str(out))
    out.mkdir(parents=True, exist_ok=True)
    for path, text in zip(paths, files.values()):
        path.write_text(text)
        if path.suffix in EXECUTABLE_SUFFIXES:
            path.chmod(0o755)
    return paths


def emit_for_search(formats: list[str], plan, model: ModelSpec, cluster, workload, estimate: Mapping[str, Any] | None,
                    out_dir: Path | None, force: bool, *, data_path: str | None = None,
                    tokenizer: str | None = None) -> list[Path]:
    """Write the launch configs of ``formats`` for a search's winner into ``out_dir``."""
    if out_dir is None:
        raise InputError("needs --out DIR, the folder the configs are written to", field="--emit")
    context = EmitContext(
        plan=plan, model=model, hardware=cluster.hardware.name, gpus_per_node=cluster.gpus_per_node,
        seq_len=workload.seq_len, global_batch=workload.global_batch, estimate=estimate, tokens=workload.tokens,
        data_path=data_path, tokenizer=tokenizer,
    )
    return write_files(Path(out_dir), render_formats(formats, context), force)


# --- the command ----------------------------------------------------------------------------

def _read_plans(source: str) -> tuple[dict, str] | None:
    path = Path(source)
    if path.is_dir():
        path = path / "plans.json"
    if path.suffix != ".json" and not path.is_file():
        return None
    if not path.is_file():
        raise InputError("file not found; give the plans.json that `autotune search --out DIR` wrote", source=str(path))
    try:
        return json.loads(path.read_text()), str(path)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at line {exc.lineno}: {exc.msg}", source=str(path)) from None


def register(app: typer.Typer) -> None:
    """Add ``autotune emit`` to ``app``."""
    from typing import Annotated

    from . import cli

    @app.command(
        epilog=(
            "**Examples**\n\n"
            "    autotune emit runs/70b/plans.json --format megatron --out runs/70b/launch\n\n"
            "    autotune emit runs/70b --rank 2 --format slurm --framework torchtitan --out runs/70b/launch\n\n"
            "    autotune emit \"tp=4,cp=16,zero=3\" -m llama3-70b -H h100-sxm5-80gb --gpus 128 -s 131072 -b 32 "
            "--format torchtitan\n\n"
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
        framework: Annotated[str, typer.Option("--framework", help="What a Slurm script runs: megatron | deepspeed | torchtitan.")] = DEFAULT_FRAMEWORK,
        model: Annotated[Optional[str], typer.Option("--model", "-m", help="Model spec (needed with a plan string).")] = None,
        hardware: Annotated[Optional[str], typer.Option("--hardware", "-H", help="Hardware profile (needed with a plan string).")] = None,
        gpus: cli.Gpus = None,
        gpus_per_node: cli.GpusPerNode = None,
        nodes: cli.Nodes = None,
        seq_len: Annotated[Optional[int], typer.Option("--seq-len", "-s", help="Sequence length (needed with a plan string).")] = None,
        global_batch: Annotated[Optional[int], typer.Option("--global-batch", "-b", help="Global batch in sequences (needed with a plan string).")] = None,
        tokens: cli.Tokens = None,
        calibration: cli.Calibration = None,
        data_path: Annotated[Optional[str], typer.Option("--data-path", help="Training data (Megatron: --data-path prefix; torchtitan: dataset path) [default: mock data].")] = None,
        tokenizer: Annotated[Optional[str], typer.Option("--tokenizer", help="Tokenizer: a Hugging Face name or folder.")] = None,
        out: Annotated[Optional[Path], typer.Option("--out", "-o", help="Write the files into this folder [default: print them].")] = None,
        force: Annotated[bool, typer.Option("--force", help="Overwrite files that already exist in --out.")] = False,
        json_out: cli.JsonOut = False,
    ) -> None:
        """Write the launch config of a plan for Megatron-LM, DeepSpeed, torchtitan or Slurm."""
        with cli.user_errors():
            from . import cli_serve

            if format in cli_serve.SERVING_FORMATS:  # vllm, sglang: serve plans (cli_serve.py)
                return cli_serve.emit_serving(format, plan_source, plan, rank, model, hardware, gpus, seq_len, out, force, json_out)
            given = TrainingRequest(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                                    seq_len=seq_len, global_batch=global_batch, tokens=tokens, calibration=calibration)
            options = EmitOptions(framework=framework, data_path=data_path, tokenizer=tokenizer)
            context = _context(plan_source, plan, rank, given, options)
            if format not in EMITTERS:
                raise InputError(f"unknown format {format!r}; choose from {', '.join(FORMATS)}", field="--format")
            files = render(format, context)
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
            if context.estimate and context.estimate.get("fits") is False:
                cli.stderr.print(f"[bold yellow]warning:[/] the cost model predicts this plan does not fit "
                                 f"({context.estimate.get('infeasible_reason', 'out of memory')}).", soft_wrap=True)


@dataclass(frozen=True)
class EmitOptions:
    """What ``autotune emit`` adds to a plan: the framework a Slurm script runs, the data and the tokenizer."""

    framework: str
    data_path: str | None = None
    tokenizer: str | None = None


def _context(plan_source: str | None, plan_text: str | None, rank: int, given: TrainingRequest,
             emit_options: EmitOptions) -> EmitContext:
    """The plan to emit, from a plans.json or a plan string.

    ``given`` holds the training flags as given: any may be None here, and a plan string needs --model,
    --hardware, --seq-len and --global-batch.
    """
    framework = emit_options.framework
    if framework not in FRAMEWORKS:
        raise InputError(f"unknown framework {framework!r}; choose from {', '.join(FRAMEWORKS)}", field="--framework")
    options = dict(data_path=emit_options.data_path, tokenizer=emit_options.tokenizer, framework=framework)
    if plan_source is not None and plan_text is not None:
        raise InputError("give the plan once: as PLAN or as --plan", field="--plan")
    if plan_source is None and plan_text is None:
        raise InputError("give a plans.json (from `autotune search --out`) or a plan string such as tp=8,pp=4",
                         field="PLAN")
    if plan_source is not None:
        loaded = _read_plans(plan_source)
        if loaded is not None:
            document, source = loaded
            for flag, value in (("--hardware", given.hardware), ("--gpus", given.gpus),
                                ("--gpus-per-node", given.gpus_per_node), ("--nodes", given.nodes),
                                ("--seq-len", given.seq_len), ("--global-batch", given.global_batch),
                                ("--tokens", given.tokens), ("--calibration", given.calibration)):
                if value is not None:
                    raise InputError(f"comes from {source}; leave it out, or emit a plan string instead", field=flag)
            spec = load_model(given.model) if given.model is not None else None
            return context_from_plans(document, rank, model=spec, source=source, **options)
        plan_text = plan_source
    return _context_from_string(plan_text, given, options)


def _context_from_string(plan_text: str, given: TrainingRequest, options: dict[str, Any]) -> EmitContext:
    from .costmodel import estimate_training
    from .space import PERMISSIVE_RULES, REASONS, rejection_reasons

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
    batch = PlanBatch.from_plans([chosen])
    reason = int(rejection_reasons(inputs.model, inputs.cluster, inputs.workload, batch, PERMISSIVE_RULES,
                                   framework=inputs.framework)[0])
    if reason:
        raise InputError(f"this plan cannot run: {REASONS[reason]}; fix the plan (see `autotune predict`)", field="--plan")
    estimate = estimate_training(inputs.model, inputs.cluster, inputs.workload, batch, inputs.framework).row(0)
    return EmitContext(
        plan=chosen, model=inputs.model, hardware=inputs.cluster.hardware.name,
        gpus_per_node=inputs.cluster.gpus_per_node, seq_len=inputs.workload.seq_len,
        global_batch=inputs.workload.global_batch, estimate=estimate, tokens=given.tokens, **options,
    )


__all__ = ["register", "emit_for_search", "expressible_mask", "check_formats", "parse_formats", "render_formats",
           "write_files", "context_from_plans"]
