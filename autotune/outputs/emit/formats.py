"""Choosing and rendering launch-config formats for a plan: ``--emit megatron,slurm`` and ``autotune emit``.

Pure: parses format lists, tells which plans a format can express, builds the emit context from a
``plans.json`` document or a plan, and renders files as text.  Writing them is the caller's job.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any, Mapping

import numpy as np

from ...errors import InputError, comma_items
from ...inputs.framework import DEFAULT_FRAMEWORK as DEFAULT_SOFTWARE
from ...inputs.modelspec import ModelSpec
from ...search.plans_file import model_from_plans, training_inputs_from_plans
from ...serving.engines import model_kv_page_tokens
from ...serving.plan import ServePlan
from ...training.estimate import estimate_training
from ...training.plan import PlanBatch, plan_from_fields
from ...training.space import plan_violation
from ..files import plan_entry
from . import (
    DEFAULT_FRAMEWORK,
    EMITTERS,
    FORMATS,
    FRAMEWORKS,
    SERVING_EMITTERS,
    EmitContext,
    get_emitter,
    render,
)
from .serve_common import ServeContext

SERVING_FORMATS = tuple(SERVING_EMITTERS)
# The framework profile (profiles/frameworks/) each launch-config format targets, and back: the
# format a Slurm script runs for a framework profile.
FORMAT_FRAMEWORKS: Mapping[str, str] = {"megatron": "megatron-lm", "deepspeed": "deepspeed", "torchtitan": "torchtitan"}
FRAMEWORK_FORMATS: Mapping[str, str] = {"megatron-lm": "megatron", "megatron-deepspeed": "deepspeed",
                                        "deepspeed": "deepspeed", "torchtitan": "torchtitan"}


def framework_for_formats(formats: list[str]) -> str:
    """The framework a search for these --emit formats plans for: the first format's (slurm: the one it runs)."""
    for name in formats:
        base, _, runs = name.partition(":")
        target = FORMAT_FRAMEWORKS.get(base) or FORMAT_FRAMEWORKS.get(runs)
        if target:
            return target
    return DEFAULT_SOFTWARE


def parse_formats(text: str | list[str]) -> list[str]:
    """``"megatron,slurm"`` -> ``["megatron", "slurm:megatron"]``.

    ``slurm`` runs the first framework named beside it (else Megatron-LM); write
    ``slurm:torchtitan`` to choose explicitly.
    """
    joined = text if isinstance(text, str) else ",".join(text)
    names = [n.lower() for n in comma_items(joined, what="--emit", field="--emit")]  # as --engine reads VLLM
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


def express_all(formats: list[str], model: ModelSpec, workload):
    """The predicate a search keeps to: plans every one of ``formats`` can express."""
    def express(plans: PlanBatch) -> np.ndarray:
        return np.logical_and.reduce([expressible_mask(f, plans, model, workload) for f in formats])
    return express


def render_formats(formats: list[str], context: EmitContext) -> dict[str, str]:
    """The files of several formats for one plan, merged by name (a Slurm script shares its framework's files)."""
    files: dict[str, str] = {}
    for spec in parse_formats(formats):
        base, framework = _split(spec)
        ctx = context if framework is None else replace(context, framework=framework)
        for name, text in render(base, ctx).items():
            if files.get(name, text) != text:
                raise InputError(f"two formats would write different {name}; emit them into separate --out folders",
                                 field="--emit")
            files[name] = text
    return files


def search_context(plan, model: ModelSpec, cluster, workload, estimate: Mapping[str, Any] | None, *,
                   data_path: str | None = None, tokenizer: str | None = None) -> EmitContext:
    """The emit context of a search's winner."""
    return EmitContext(
        plan=plan, model=model, hardware=cluster.hardware.name, hardware_profile=cluster.hardware,
        gpus_per_node=cluster.gpus_per_node,
        seq_len=workload.seq_len, global_batch=workload.global_batch, estimate=estimate, tokens=workload.tokens,
        data_path=data_path, tokenizer=tokenizer, moe_capacity_factor=workload.moe_capacity_factor,
    )




def context_from_plans(document: Mapping[str, Any], rank: int, *, model: ModelSpec | None = None,
                       source: str = "plans.json", software: str | None = None, software_field: str = "--format",
                       **options: Any) -> EmitContext:
    """The training plan of rank ``rank`` in a ``plans.json`` document, with its inputs and estimate.

    ``software`` (a framework NAME[@VERSION]) estimates the plan for that framework instead of the file's."""
    inputs = document.get("inputs")
    if not isinstance(inputs, dict):
        raise InputError("is not a plans.json from `autotune search --out` (it needs 'inputs' and 'plans')", source=source)
    for key in ("model", "hardware", "gpus", "gpus_per_node", "seq_len", "global_batch"):
        if key not in inputs:
            raise InputError(f"inputs lack '{key}'; rerun `autotune search --out`", source=source, field=f"inputs.{key}")
    entry = plan_entry(document, rank, source)
    if model is None:
        model = model_from_plans(inputs, source)
    elif model.name != inputs["model"]:
        raise InputError(f"{source} was searched for model {inputs['model']!r}, but --model gives {model.name!r}",
                         field="--model")
    t = training_inputs_from_plans(inputs, source, model=model, framework=software)
    if not isinstance(entry.get("plan"), dict):
        raise InputError(f"plan of rank {rank} has no 'plan' object; rerun `autotune search --out DIR`", source=source,
                         field="plans.plan")
    try:
        plan = plan_from_fields(entry["plan"], t.cluster.n_gpus)
    except (KeyError, TypeError, ValueError) as exc:
        raise InputError(f"plan of rank {rank} is malformed: {exc}", source=source, field="plans.plan") from None
    why = plan_violation(t.model, t.cluster, t.workload, plan, t.framework)
    if why and software is not None:  # another framework than the search's: it may not offer the plan
        raise InputError(f"plan of rank {rank} in {source} cannot run on {software}: {why}; search again with "
                         f"--framework {software} for plans it runs", field=software_field)
    if why:  # a search ranks no such plan: the file was edited
        raise InputError(f"plan of rank {rank} cannot run: {why}; fix the plan or rerun "
                         "`autotune search --out DIR`", source=source, field="plans.plan")
    batch = PlanBatch.from_plans([plan])
    # Estimated again from the embedded inputs, not copied from the file: the comments quote it.
    estimate = estimate_training(t.model, t.cluster, t.workload, batch, t.framework).row(0)
    return EmitContext(
        plan=plan, model=model, hardware=t.cluster.hardware.name, hardware_profile=t.cluster.hardware,
        gpus_per_node=t.cluster.gpus_per_node,
        seq_len=t.workload.seq_len, global_batch=t.workload.global_batch, estimate=estimate,
        tokens=t.workload.tokens, moe_capacity_factor=t.workload.moe_capacity_factor, **options,
    )


def hf_model_name(name: str | None) -> str | None:
    """The Hugging Face id a --model names, which engines load by default; None for a bundled name or a file, and
    for an id with a revision (``org/name@rev``: the scripts would load another revision, so they ask for MODEL).
    An id written as the repository's address (``https://huggingface.co/org/name``) loads as ``org/name``.  Only an
    id the catalogue lists is one (the only ids --model takes): a plans.json records the folder or file a search
    read, and once it is gone (the file emitted on another machine) ``cfgs/qwen3`` or ``/data/qwen3`` is a path, not
    a repository for the engine to fetch from the Hub."""
    from pathlib import Path

    from ...inputs.catalogue import hf_id_parts, lookup_hf_id

    if not name or "/" not in name or name.endswith((".json", ".yaml", ".yml")) or Path(name).exists():
        return None
    bare, revision = hf_id_parts(name)
    return None if revision is not None or lookup_hf_id(bare) is None else bare


def default_model_path(name: str | None, checkpoint: str, weights: str, engine: str, *, is_moe: bool,
                       fp4_cores: bool) -> str | None:
    """The weights a serving script loads when MODEL is unset: the Hugging Face id given as --model
    (``hf_model_name``), unless that id's weights are not the ones the plan runs, and the script then stops until
    MODEL names them: --checkpoint names weights of another precision (``checkpoint_conflict_note``), or the plan's
    weights need another checkpoint (``checkpoint.how`` is ``needs``: an NVFP4 plan of deepseek-ai/DeepSeek-R1, whose
    published weights are FP8, would otherwise load the FP8 weights into a memory flag sized for FP4 ones)."""
    from ...serving.checkpoint import checkpoint_conflict_note, how

    if checkpoint_conflict_note(name, checkpoint) or how(weights, checkpoint, engine, is_moe,
                                                         fp4_cores=fp4_cores) == "needs":
        return None
    return hf_model_name(name)


def model_revision_note(name: str | None) -> str | None:
    """What the serving scripts do with a --model that names a revision (``org/name@rev``), which they cannot pass
    on: they stop until MODEL names the weights.  None for any other name, and for a local spec or config file
    whose path holds an '@' (``./models/llama@v2/config.json`` is a file, not revision ``v2/config.json``)."""
    from pathlib import Path

    from ...inputs.catalogue import hf_id_parts

    if not name or "/" not in name or hf_model_name(name) is not None:
        return None
    if name.lower().endswith((".json", ".yaml", ".yml")) or Path(name).exists():
        return None
    bare, revision = hf_id_parts(name)
    if revision is None:
        return None
    return (f"--model {name} names revision {revision} of {bare}, which the launch scripts do not pass on: they stop "
            f"until MODEL names those weights (a local snapshot of that revision); or give --model-path")


# Serve-space rules that mean the GPU cannot run the plan at all (see autotune/serving/space.py REASONS).
_UNSUPPORTED_BY_GPU = frozenset({"weight precision not supported by the GPU", "KV-cache dtype not supported by the GPU"})


def runs_short(format: str, estimate: dict) -> bool:
    """A serving plan whose only shortfall is a batch limit above what the engine's KV cache holds: the engine starts
    and admits fewer sequences than the limit (vLLM and SGLang queue or preempt the rest), so the files are written
    with a warning (a plan searched for another engine, re-checked against this one's budget, is often so); weights
    or a reserve past the budget, or a precision the GPU lacks, stop the engine, and are refused."""
    return format in SERVING_FORMATS and str(estimate.get("infeasible_reason", "")).startswith("max_batch exceeds")


def serving_files(format: str, plan: ServePlan, model: ModelSpec, hardware, input_len: int, output_len: int,
                  estimate: Mapping[str, Any] | None = None, model_path: str | None = None, *,
                  gpus_per_node: int | None = None, checkpoint: str = "bf16",
                  engine_batch_limit: bool = False,
                  memory_fraction: float | None = None,
                  release: str | None = None, workload: Any = None,
                  params: Any = None, searched: bool = True,
                  model_name: str | None = None) -> tuple[dict[str, str], dict[str, Any]]:
    """The launch files of a serve plan for ``vllm`` or ``sglang``, and the plan's estimate on that engine.

    The memory flag in the files is the engine budget the plan's batch is checked against here (a plan
    searched for another engine is re-checked: ``estimate["fits"]`` says whether its batch fits).
    ``engine_batch_limit``: the plan's max_batch is the engine's default (a plan string without one), which the
    engine caps at what its KV cache holds, as ``predict`` takes it.  ``memory_fraction``: the value of the
    engine's memory flag the user set (None: the engine's default rule); the files set the value checked.
    ``release``: the engine release the plan was searched for (``vllm-0.12``; None: the family's current one); the
    files say when their flags are another release's (the emitters write vLLM 0.33's and SGLang 0.5.23's).
    ``workload``: the search's ``ServeWorkload`` (its load and targets), so a plan re-estimated on another engine
    is estimated at the same load and says whether it misses the targets there; None: the lengths alone.
    ``params``: the engine's serving parameters (a --calibration overlay's); None: the shipped ones.
    ``searched``: the plan is a search's (False: a plan string, which no search found as the closest to the targets).
    ``model_name``: the --model typed (a Hugging Face id names the files' model; None: the spec's name).
    """
    from ...inputs.catalogue import model_label
    from ...inputs.hardware import Cluster, load_hardware
    from ...inputs.workload import ServeWorkload
    from ...search.serving import annotate_checkpoint
    from ...serving.calibrated import CURRENT
    from ...serving.checkpoint import needs_remote_code
    from ...serving.engines import DEFAULTS
    from ...serving.estimate import estimate_serving
    from ...serving.plan import ServePlanBatch
    from ...serving.space import REASONS, rejection_reasons

    if format not in SERVING_EMITTERS:
        raise InputError(f"unknown serving format {format!r}; choose from {', '.join(SERVING_FORMATS)}",
                         field="--format")
    if workload is None:
        workload = ServeWorkload(input_len, output_len)
    max_model_len = workload.max_len
    hw = hardware if not isinstance(hardware, str) else load_hardware(hardware)
    gpn = gpus_per_node or hw.gpus_per_node
    cluster = Cluster(hw, plan.n_gpus, min(gpn, plan.n_gpus))
    batch = ServePlanBatch.from_plans([plan])
    est = estimate_serving(model, cluster, workload, batch, CURRENT[format] if params is None else params, engine=format,
                           engine_batch_limit=engine_batch_limit, memory_fraction=memory_fraction)
    mine = annotate_checkpoint(est.row(0), plan, checkpoint, format, model.is_moe, fp4_cores=hw.supports("fp4"))
    # The estimate checks memory only; a precision the GPU lacks is a rule of the search space, which `predict`
    # reports as "does not fit" with the rule's own words: the files and the caller say the same. Layouts the
    # rules merely prefer against (tp over a node) stay the user's call and are not flagged.
    code = int(rejection_reasons(model, cluster, batch, frozenset({"dp"}), engine=format, checkpoint=checkpoint)[0])
    if REASONS[code] in _UNSUPPORTED_BY_GPU:
        mine.update(fits=False, meets_targets=False, infeasible_reason=REASONS[code])
    knob = float(est.memory_knob[0])
    prefill_knob = None
    if est.prefill_memory_knob is not None and np.isfinite(est.prefill_memory_knob[0]):
        prefill_knob = float(est.prefill_memory_knob[0])
    for value in (knob, prefill_knob):
        # SGLang's fraction is what its reserve (activations, CUDA graphs for max_batch) leaves of the GPU: a batch
        # limit whose reserve is the whole GPU leaves none, and the engine refuses a flag outside (0, 1]
        if value is not None and not 0.0 < value <= 1.0:
            raise InputError(f"0 < {DEFAULTS[format].memory_knob} <= 1 must hold, but this plan would need "
                             f"({DEFAULTS[format].memory_knob.lstrip('-')}={value:g}, max_batch={plan.max_batch}): "
                             "its reserve for that batch is more than the GPU holds; give a smaller max_batch",
                             field="max_batch")
    shown = dict(estimate) if estimate else mine
    shown = {**shown, "memory_gib_per_gpu": mine["memory_gib_per_gpu"]}
    # a disaggregated plan's figure is the fuller pool's; this sentence is about the decode engines, whose parts follow
    needed, per = mine.get("decode_memory_gib_per_gpu", mine["memory_gib_per_gpu"]), (
        "decode GPU" if prefill_knob is not None else "GPU")
    note = (f"memory: {DEFAULTS[format].memory_knob} {knob:g} is the budget autotune checked this plan's batch "
            f"against ({needed:.1f} GiB needed per {per}: weights {mine['memory_breakdown_gib']['weights']:.1f}, "
            f"KV {mine['memory_breakdown_gib']['kv_cache']:.1f} of a {mine['memory_breakdown_gib']['kv_pool']:.1f} GiB pool)")
    if prefill_knob is not None:
        note += (f"; the prefill engines' {DEFAULTS[format].memory_knob} {prefill_knob:g} is theirs "
                 f"({mine['prefill_memory_gib_per_gpu']:.1f} GiB needed per prefill GPU)")
    if not mine["fits"]:
        note += f"; WARNING: {mine.get('infeasible_reason', 'the batch does not fit')}"
    elif engine_batch_limit and mine.get("max_batch_fit", plan.max_batch) < plan.max_batch:
        # the engine's own batch limit: its KV cache, not the flag, bounds the batch
        note += (f"; the batch limit {plan.max_batch} is the engine's default, and its KV cache holds "
                 f"{mine['max_batch_fit']} sequences at full length, which bounds the batch instead (a few more "
                 "while outputs are short; set max_batch in the plan to have a limit checked)")
    if format == "sglang" and memory_fraction is None and knob < SGLANG_IDLE_NOTE_FRACTION:
        # SGLang's default reserve (its own heuristic, mirrored: engines.py) grows with attention DP and the CUDA-graph
        # batch; the static pool is then a small share of the GPU, which --memory-fraction (not searched) would raise
        note += (f"; SGLang's default reserve leaves {DEFAULTS[format].memory_knob} at {knob:g}, "
                 f"{(1.0 - knob) * hw.memory_gib:.0f} GiB of the {hw.memory_gib:g} GiB outside the static pool: "
                 "--memory-fraction F (search and emit) sets it and raises the batch the pool holds")
    other = other_release(format, release)
    if other:
        note += f"\n{other}"  # a line of its own in the header
    ctx = ServeContext(plan=plan, model=model, hardware=hw.name, gpus_per_node=cluster.gpus_per_node,
                       max_model_len=max_model_len, model_path=model_path, checkpoint=checkpoint,
                       fp4_cores=hw.supports("fp4"), memory_fraction=knob,
                       prefill_memory_fraction=prefill_knob,
                       prefill_tokens=int(DEFAULTS[format].chunk_tokens(hw.memory_gib, hw.name)), estimate=shown,
                       engine_note=note, remote_code=needs_remote_code(model, model_path), load=workload.load_text,
                       gpu_memory_gib=hw.memory_gib,
                       kv_page_tokens=model_kv_page_tokens(model, hw),
                       searched=searched, needs_checkpoint=mine["weights_from"] == "needs",
                       scale_up_gpus=cluster.gpus_per_scale_up_domain,
                       label=model_label(model_name, model.name))
    return SERVING_EMITTERS[format](ctx), mine


# Below this --mem-fraction-static, SGLang's default reserve leaves most of the GPU outside its static pool
# (weights + KV), which the launch file says (wide attention DP: 0.3 on GB200 at DP64)
SGLANG_IDLE_NOTE_FRACTION = 0.5

# The release each serving emitter writes flags for (vllm.RELEASE, sglang.RELEASE), as (MAJOR, MINOR).
EMITTED_RELEASES = {"vllm": (0, 33), "sglang": (0, 5)}


def other_release(format: str, release: str | None) -> str:
    """What to say when the plan was searched for a release of ``format`` other than the one the files target."""
    import re

    found = re.fullmatch(r"([a-z]+)-(\d+)\.(\d+)", release or "")
    if not found or found.group(1) != format or format not in EMITTED_RELEASES:
        return ""
    version = (int(found.group(2)), int(found.group(3)))
    target = EMITTED_RELEASES[format]
    if version == target:
        return ""
    return (f"WARNING: the plan was estimated for {format} {version[0]}.{version[1]}, but these flags are "
            f"{format} {target[0]}.{target[1]}'s; an older release may not accept them")


__all__ = ["FORMAT_FRAMEWORKS", "other_release", "runs_short", "FRAMEWORK_FORMATS", "hf_model_name", "model_revision_note", "SERVING_FORMATS", "framework_for_formats", "check_formats", "context_from_plans", "express_all", "expressible_mask",
           "parse_formats", "render_formats", "search_context", "serving_files"]
