"""torchtitan 0.3.0: a registered Python config and the torchrun launch command.

Since 2026 torchtitan no longer reads TOML job files: a config is a Python function
returning ``Trainer.Config``, picked with ``--module MODULE --config FUNCTION``
(``ConfigManager``; a fully qualified module path is accepted).  We write the module
``autotune_torchtitan.py`` whose function ``autotune_plan`` starts from torchtitan's
own config for the matching Llama 3 flavour and sets the plan on it.  Mapping:

* ``zero=0`` replicate (DDP): ``data_parallel_replicate_degree = dp``; ``zero>=1`` FSDP2:
  ``data_parallel_shard_degree = dp``, resharding after forward only for ``zero=3``
  (ZeRO-1/2 keep the gathered weights to the backward, as FSDP's ``never``);
* ``tp``/``sp`` ``tensor_parallel_degree``/``enable_sequence_parallel``; ``cp``
  ``context_parallel_degree``; ``pp`` ``pipeline_parallel_degree`` with ``1F1B``, or
  ``Interleaved1F1B`` and ``pp*vp`` stages for ``vp>1``;
* ``mbs`` ``pipeline_parallel_microbatch_size`` under pipelining (``local_batch_size`` is
  then the DP rank's whole share), else ``local_batch_size`` with gradient accumulation up
  to ``global_batch_size``;
* ``recompute`` ``FullAC``/``SelectiveAC`` (torchtitan's op-level selective policy)/``None``;
* ``precision=fp8`` the ``Float8LinearConverter`` (torchao, rowwise) with ``torch.compile``.

Only models whose shape equals a torchtitan flavour can be expressed: torchtitan defines each
architecture in code.  Dense models: the Llama 3 flavours.  Mixtures of experts (``MOE_MODELS``):
DeepSeek-V3 (``deepseek_v3_671b``, with its MTP module and MTP loss), Qwen3-30B-A3B
(``qwen3_30b_a3b``) and gpt-oss-120b (``gpt_oss_120b``), each equal to the bundled spec of that name;
``ep`` is ``parallelism.expert_parallel_degree``.  torchtitan 0.3.0 has no expert tensor
parallelism (experts are never split; EP borrows ranks from FSDP and TP, so ep must divide
dp_shard*cp*tp), so an MoE plan needs etp=1; expert parallelism needs CUDA graphs off.  fp8 adds
torchao's grouped-experts converter, as ``deepseek_v3_671b_float8`` does.
"""

from __future__ import annotations

import math

import numpy as np

from ...inputs.modelspec import ModelSpec
from ...training.plan import CATEGORIES, Plan, PlanBatch
from . import shell
from .base import EmitContext, Emitter, Launch, Limit, header, model_limit, node_script, refuse_token_dropping
from .shell import Raw

RELEASE = "torchtitan 0.3.0"
MODULE = "autotune_torchtitan"
FUNCTION = "autotune_plan"
CONFIG_FILE = f"{MODULE}.py"
SCRIPT = "torchtitan_launch.sh"
ROPE_MAX_SEQ_LEN = 131072  # max_seq_len of the RoPE cache in every Llama 3 flavour


# Shapes of torchtitan's Llama 3 flavours (torchtitan/models/llama3/__init__.py), checked
# against the installed package by the `frameworks` tests.
FLAVOURS: dict[str, dict] = {
    "1B": dict(n_layers=16, hidden_size=2048, n_heads=32, n_kv_heads=8, head_dim=64, ffn_hidden_size=8192,
               vocab_size=128256, tied_embeddings=True, base="llama3_8b"),
    "3B": dict(n_layers=28, hidden_size=3072, n_heads=24, n_kv_heads=8, head_dim=128, ffn_hidden_size=8192,
               vocab_size=128256, tied_embeddings=True, base="llama3_8b"),
    "8B": dict(n_layers=32, hidden_size=4096, n_heads=32, n_kv_heads=8, head_dim=128, ffn_hidden_size=14336,
               vocab_size=128256, tied_embeddings=False, base="llama3_8b"),
    "70B": dict(n_layers=80, hidden_size=8192, n_heads=64, n_kv_heads=8, head_dim=128, ffn_hidden_size=28672,
                vocab_size=128256, tied_embeddings=False, base="llama3_70b"),
    "405B": dict(n_layers=126, hidden_size=16384, n_heads=128, n_kv_heads=8, head_dim=128, ffn_hidden_size=53248,
                 vocab_size=128256, tied_embeddings=False, base="llama3_405b"),
}
SHAPE_KEYS = ("n_layers", "hidden_size", "n_heads", "n_kv_heads", "head_dim", "ffn_hidden_size", "vocab_size",
              "tied_embeddings")


# Mixtures of experts torchtitan 0.3.0 defines, by the bundled spec they equal (torchtitan/models/*/
# __init__.py and config_registry.py; the `frameworks` tests compare the shapes with the package).
MOE_MODELS: dict[str, dict] = {
    "deepseek-v3": dict(package="deepseek_v3", flavour="671B", base="deepseek_v3_671b", mtp=True),
    "qwen3-30b-a3b": dict(package="qwen3", flavour="30B-A3B", base="qwen3_30b_a3b", mtp=False),
    "gpt-oss-120b": dict(package="gpt_oss", flavour="120b", base="gpt_oss_120b", mtp=False),
}
_ARCHITECTURE_ONLY = ("name", "description", "source", "dropout", "max_seq_len")


def moe_model_of(model: ModelSpec) -> str | None:
    """The bundled MoE spec (a key of MOE_MODELS) this model equals, architecture for architecture."""
    import dataclasses

    from ...inputs.modelspec import load_model

    if not model.moe:
        return None
    blank = {k: None for k in _ARCHITECTURE_ONLY}
    for name in MOE_MODELS:
        if dataclasses.replace(load_model(name), **blank) == dataclasses.replace(model, **blank):
            return name
    return None


def flavour_of(model: ModelSpec) -> str | None:
    """The torchtitan Llama 3 flavour with exactly this model's shape, if any."""
    if model.moe or model.mlp != "swiglu" or model.norm != "rmsnorm" or model.position_embedding != "rope":
        return None
    for name, shape in FLAVOURS.items():
        if all(getattr(model, key) == shape[key] for key in SHAPE_KEYS):
            return name
    return None


def expressible_model(model: ModelSpec) -> bool:
    return flavour_of(model) is not None or moe_model_of(model) is not None


def _model_why(plan: Plan, model: ModelSpec) -> str:
    kind = []
    if model.moe:
        kind.append("mixture-of-experts")
    if model.mlp != "swiglu":
        kind.append(f"mlp={model.mlp}")
    if model.norm != "rmsnorm":
        kind.append(f"norm={model.norm}")
    if model.position_embedding != "rope":
        kind.append(f"position_embedding={model.position_embedding}")
    what = ", ".join(kind) if kind else "its layer sizes"
    return (f"model {model.name} ({what}) matches no torchtitan model: torchtitan 0.3.0 defines architectures in code; "
            f"its Llama 3 flavours are {', '.join(FLAVOURS)} and its mixtures of experts those of "
            f"{', '.join(MOE_MODELS)}; use --format megatron (or deepspeed)")


def stages_per_rank(n_layers: int, pp: int, vp: int) -> int | None:
    """Layers per virtual stage such that torchtitan builds exactly pp*vp stages; None if none does."""
    if pp == 1:
        return None
    per_stage = math.ceil(n_layers / (pp * vp))
    return per_stage if math.ceil(n_layers / per_stage) == pp * vp else None


def _pipeline_unsplittable(plans: PlanBatch, model: ModelSpec) -> np.ndarray:
    out = np.zeros(len(plans), dtype=bool)
    for pp, vp in {(int(a), int(b)) for a, b in zip(plans.pp, plans.vp)}:
        if pp > 1 and stages_per_rank(model.n_layers, pp, vp) is None:
            out |= (plans.pp == pp) & (plans.vp == vp)
    return out


def _code(key: str, value: str) -> int:
    return CATEGORIES[key].index(value)


def _expert_mesh_refused(plans: PlanBatch, model: ModelSpec) -> np.ndarray:
    if not model.moe:
        return np.zeros(len(plans), dtype=bool)
    shard = np.where(plans.zero == 0, 1, plans.dp)
    return (plans.etp != 1) | ((shard * plans.cp * plans.tp) % plans.ep != 0)


def _flex_context_parallel(plans: PlanBatch, model: ModelSpec) -> np.ndarray:
    name = moe_model_of(model)
    if name is None or MOE_MODELS[name]["package"] != "deepseek_v3":
        return np.zeros(len(plans), dtype=bool)
    return np.asarray(plans.cp) > 1


LIMITS = (
    model_limit("model", lambda model: not expressible_model(model), _model_why),
    # torchtitan/models/deepseek_v3/model.py, DeepSeekV3Model.Config.update_from_config: context parallelism with an
    # inner attention other than ScaledDotProductAttention raises NotImplementedError ("Context Parallel for DeepSeek
    # V3 only supports ScaledDotProductAttention") when the trainer builds the model; the module builds the 671B
    # flavour with flex attention, as torchtitan's deepseek_v3_671b config does.
    Limit("cp", _flex_context_parallel,
          lambda plan, model: f"plan field cp={plan.cp}: torchtitan's DeepSeek-V3 runs context parallelism only with "
          "SDPA attention and its 671B config builds flex attention (the trainer raises NotImplementedError at start); "
          "use cp=1, or --format megatron"),
    Limit("etp", _expert_mesh_refused,
          lambda plan, model: f"plan fields etp={plan.etp}, ep={plan.ep}: torchtitan 0.3.0 has no expert tensor "
          "parallelism (its ConfigManager rejects expert_tensor_parallel_degree) and forms EP from the FSDP, CP "
          "and TP ranks (ep must divide dp_shard*cp*tp; zero=0 replicates instead of sharding); use etp=1 and such an "
          "ep, or --format megatron"),
    Limit("precision", lambda plans, model: plans.precision == _code("precision", "fp16"),
          lambda plan, model: "plan field precision=fp16: torchtitan trains in bf16 or float32 only; "
          "use bf16 or fp8, or --format megatron or deepspeed"),
    # torchtitan 0.3.0's quantized training is torchao Float8 and MXFP8 (its [quantize] sections); NVFP4 training is
    # a torchao prototype torchtitan does not configure
    Limit("precision", lambda plans, model: plans.precision == _code("precision", "fp4"),
          lambda plan, model: "plan field precision=fp4: torchtitan 0.3.0 configures fp8 and MXFP8 training "
          "(torchao), not NVFP4; use bf16 or fp8, or --format megatron"),
    Limit("offload", lambda plans, model: plans.offload == _code("offload", "cpu"),
          lambda plan, model: "plan field offload=cpu: torchtitan's training.enable_cpu_offload moves weights and "
          "gradients to the host as well, not the optimizer state alone; use offload=none, "
          "or --format megatron or deepspeed"),
    Limit("pp", _pipeline_unsplittable,
          lambda plan, model: f"plan fields pp={plan.pp}, vp={plan.vp}: no layers-per-stage count gives torchtitan "
          f"exactly pp*vp={plan.pp * plan.vp} stages of {model.n_layers} layers; choose pp and vp that divide "
          f"{model.n_layers}, or --format megatron"),
)


def _seq_len_check(model: ModelSpec, seq_len: int) -> str | None:
    if seq_len > ROPE_MAX_SEQ_LEN:
        return (f"workload field seq_len={seq_len}: torchtitan's Llama 3 RoPE cache holds {ROPE_MAX_SEQ_LEN} "
                f"positions; use --seq-len <= {ROPE_MAX_SEQ_LEN}, or --format megatron")
    return None


def settings(context: EmitContext) -> list[tuple[str, object]]:
    """(attribute path on Trainer.Config, Python value) pairs, in the order they are written."""
    plan = context.plan
    replicate, shard = (plan.dp, 1) if plan.zero == 0 else (1, plan.dp)
    if plan.pp > 1:
        local_batch = context.global_batch // plan.dp
    else:
        local_batch = plan.mbs
    out: list[tuple[str, object]] = [
        ("training.seq_len", context.seq_len),
        ("training.local_batch_size", local_batch),
        ("training.global_batch_size", context.global_batch),
        ("parallelism.data_parallel_replicate_degree", replicate),
        ("parallelism.data_parallel_shard_degree", shard),
        ("parallelism.fsdp_reshard_after_forward", "always" if plan.zero == 3 else "never" if plan.zero else "default"),
        ("parallelism.tensor_parallel_degree", plan.tp),
        ("parallelism.enable_sequence_parallel", bool(plan.sp)),
        ("parallelism.context_parallel_degree", plan.cp),
        ("parallelism.expert_parallel_degree", plan.ep),
        ("parallelism.pipeline_parallel_degree", plan.pp),
    ]
    if plan.ep > 1:
        # The default all-to-all synchronises with the host, which CUDA graphs (on by default in 0.3.0)
        # cannot capture: ConfigManager refuses EP > 1 for qwen3 and gpt-oss configs without this.
        out.append(("training.disable_cuda_graphs", True))
    if plan.pp > 1:
        out += [
            ("parallelism.pipeline_parallel_schedule", "Interleaved1F1B" if plan.vp > 1 else "1F1B"),
            ("parallelism.pipeline_parallel_microbatch_size", plan.mbs),
            ("parallelism.pipeline_parallel_layers_per_stage", stages_per_rank(context.model.n_layers, plan.pp, plan.vp)),
            ("parallelism.pipeline_parallel_first_stage_less_layers", 0),
            ("parallelism.pipeline_parallel_last_stage_less_layers", 0),
        ]
        if plan.ep == 1:
            out.append(("training.disable_cuda_graphs", True))  # torchtitan's CUDA graphs do not support pipelining yet
    out += [
        # Async TP (overlapping TP communication with compute) needs torch.compile; the cost model
        # assumes TP communication overlapped, so plans with tp > 1 turn both on.
        ("compile.enable", plan.precision == "fp8" or plan.tp > 1),
        ("compile.enable_async_tensor_parallel", plan.tp > 1),
    ]
    if context.train_steps:
        out.append(("training.steps", context.train_steps))
    if context.tokenizer is not None:
        out.append(("hf_assets_path", context.tokenizer))
    if context.data_path is not None:
        out.append(("dataloader.dataset_path", context.data_path))
    return out


def config_module(context: EmitContext) -> str:
    plan, model = context.plan, context.model
    if moe_model_of(model) is not None:
        return moe_config_module(context)
    flavour = flavour_of(model)
    assert flavour is not None, "render is called only for an expressible plan"
    base = FLAVOURS[flavour]["base"]
    lines, recompute = _module_preamble(context)
    imports = []
    if plan.precision == "fp8":
        imports.append("from torchtitan.components.quantization import Float8LinearConverter")
    if recompute:
        imports.append(f"from torchtitan.distributed.activation_checkpoint import {recompute}")
    imports += [
        "from torchtitan.models.llama3 import model_registry",
        f"from torchtitan.models.llama3.config_registry import {base}",
    ]
    lines += imports + ["", ""]
    lines += [f"def {FUNCTION}():", f'    """{plan.layout()} on {context.n_gpus} GPUs, from torchtitan\'s {base}."""']
    lines.append(f"    config = {base}()")
    if plan.precision == "fp8":
        converters = "[Float8LinearConverter.Config(filter_fqns=[\"lm_head\"], model_compile_enabled=True)]"
    else:
        converters = "None"
    lines.append(f"    config.model_spec = model_registry({flavour!r}, converters={converters})")
    for path, value in settings(context):
        lines.append(f"    config.{path} = {value!r}")
    lines.append(f"    config.activation_checkpoint = {recompute + '.Config()' if recompute else 'None'}")
    lines.append("    return config")
    return "\n".join(lines) + "\n"


# RoPE of torchtitan's Llama 3 flavours, set in model code (torchtitan/models/llama3/__init__.py, llama3_configs:
# RoPE.Config(theta=500000, scaling="llama") in every flavour, Llama 3.1's frequency scaling)
FLAVOUR_ROPE_THETA = 500000.0
FLAVOUR_ROPE_SCALING = "llama3"


def model_code_notes(model: ModelSpec) -> list[str]:
    """What torchtitan takes only from its model code (the flavour model_registry builds), which this module does not
    set: the spec's RoPE and router, said so that a reader can compare; and where a Llama 3 flavour's RoPE differs
    from the spec's, that the run differs there."""
    theta = model.rope_theta
    rope = ("no theta stated" if theta is None else f"theta {theta:.0f}" if float(theta).is_integer()
            else f"theta {theta:g}")
    rope += f", {model.rope_scaling} scaling" if model.rope_scaling else ", no scaling"
    moe = model.moe
    router = ""
    if moe is not None:
        router = (f"; router top-{moe.top_k} {moe.router_score}"
                  + (f" within {moe.routing_group_topk} of {moe.routing_groups} groups" if moe.routing_groups > 1 else "")
                  + (f", weights scaled by {moe.router_topk_scaling:g}" if moe.router_topk_scaling is not None else "")
                  + ", dropless, with torchtitan's own load balancing")
    what = "RoPE and the router are" if moe is not None else "RoPE is"
    notes = [f"{what} torchtitan's model code (the flavour model_registry builds), which this module does not set: "
             f"{model.name} has RoPE {rope}{router}."]
    if moe is None and ((theta is not None and theta != FLAVOUR_ROPE_THETA) or model.rope_scaling != FLAVOUR_ROPE_SCALING):
        notes.append(f"torchtitan's Llama 3 flavours rotate with theta {FLAVOUR_ROPE_THETA:.0f} and Llama 3.1's "
                     f"frequency scaling, unlike {model.name}: to match it, change config.model_spec's RoPE config "
                     "(theta, scaling) in autotune_plan().")
    return notes


def _module_preamble(context: EmitContext) -> tuple[list[str], str | None]:
    """The header comments and docstring of a config module, and the plan's activation-checkpoint class."""
    lines = shell.comment_lines(header(RELEASE, context, [
        f"torchtitan config module: launch with `-m torchtitan.train --module {MODULE} --config {FUNCTION}`",
        "and this file's folder on PYTHONPATH (torchtitan_launch.sh and the Slurm script do both).",
        *model_code_notes(context.model),
    ]))
    lines += ["", '"""A torchtitan 0.3.0 config for one autotune plan; see the comments above."""', ""]
    return lines, {"none": None, "selective": "SelectiveAC", "full": "FullAC"}[context.plan.recompute]


def moe_config_module(context: EmitContext) -> str:
    """The config module for one of torchtitan's mixtures of experts (MOE_MODELS)."""
    plan, model = context.plan, context.model
    entry = MOE_MODELS[moe_model_of(model)]
    package, base = entry["package"], entry["base"]
    lines, recompute = _module_preamble(context)
    imports = []
    if plan.precision == "fp8":
        imports.append("from torchtitan.components.quantization import Float8GroupedExpertsConverter, "
                       "Float8LinearConverter")
    if recompute:
        imports.append(f"from torchtitan.distributed.activation_checkpoint import {recompute}")
    if entry["mtp"]:
        imports += ["from torchtitan.models.common.config_utils import decoder_vocab_size",
                    f"from torchtitan.models.{package}.mtp import MTPLoss"]
    imports += [f"from torchtitan.models.{package} import model_registry",
                f"from torchtitan.models.{package}.config_registry import {base}"]
    lines += imports + ["", ""]
    lines += [f"def {FUNCTION}():", f'    """{plan.layout()} on {context.n_gpus} GPUs, from torchtitan\'s {base}."""']
    lines.append(f"    config = {base}()")
    arguments = [repr(entry["flavour"])]
    if package == "deepseek_v3":
        arguments.append("attn_backend='flex'")
    if entry["mtp"] and model.mtp_layers:
        arguments.append(f"num_mtp_layers={model.mtp_layers}")
    if plan.precision == "fp8":
        arguments.append('converters=[Float8LinearConverter.Config(filter_fqns=["lm_head", "router.gate"], '
                         'model_compile_enabled=True), Float8GroupedExpertsConverter.Config(model_compile_enabled=True)]')
    lines.append(f"    config.model_spec = model_registry({', '.join(arguments)})")
    if entry["mtp"] and model.mtp_layers:
        lines.append("    config.loss = MTPLoss.Config(global_vocab_size=decoder_vocab_size(config.model_spec))")
    for path, value in settings(context):
        lines.append(f"    config.{path} = {value!r}")
    lines.append(f"    config.activation_checkpoint = {recompute + '.Config()' if recompute else 'None'}")
    lines.append("    return config")
    return "\n".join(lines) + "\n"


def launch(context: EmitContext) -> Launch:
    return Launch(
        program=("-m", "torchtitan.train"),
        arrays=(("TORCHTITAN_ARGS", (("--module", MODULE), ("--config", FUNCTION))),),
        exports=(("PYTHONPATH", Raw('"${HERE}${PYTHONPATH:+:${PYTHONPATH}}"')),),
        notes=(f"The config lives in {CONFIG_FILE} beside this script; torchtitan {RELEASE.split()[-1]} "
               "(pip install torchtitan==0.3.0) must be installed.",),
    )


def render(context: EmitContext) -> dict[str, str]:
    # torchtitan's MoE routes every token (token-choice, dropless; torchtitan/models/moe): no capacity.
    refuse_token_dropping(context, "torchtitan", "runs its MoE dropless, with no expert capacity")
    return {CONFIG_FILE: config_module(context), SCRIPT: node_script(EMITTER, context, launch(context))}


EMITTER = Emitter(
    name="torchtitan",
    release=RELEASE,
    summary="a registered Python config (Trainer.Config) and the torchrun launch command",
    limits=LIMITS,
    render_files=render,
    launch=launch,
    workload_checks=(_seq_len_check,),
)
