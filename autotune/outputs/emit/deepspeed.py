"""DeepSpeed 0.19.8: ``ds_config.json`` and the ``deepspeed`` launch command.

DeepSpeed trains the model that a training script builds; the config carries the
parallel layout and the batch.  Mapping of the plan:

* data parallelism with ZeRO stage ``zero`` (0-3); ``offload=cpu`` moves the optimizer
  state to the host (``zero_optimization.offload_optimizer``);
* ``tp`` AutoTP training (``tensor_parallel.autotp_size``), ``ep`` AutoEP
  (``expert_parallel.autoep_size``), both for Hugging Face models;
* ``pp`` the pipeline engine: the script wraps its layers in
  ``deepspeed.pipe.PipelineModule(num_stages=pp)``; the engine runs plain 1F1B, so
  ``vp`` must be 1, ZeRO at most 1, and AutoTP/AutoEP cannot be combined with it;
* ``recompute=full`` ``activation_checkpointing`` (and the pipeline's checkpoint interval);
* ``train_batch_size = train_micro_batch_size_per_gpu x gradient_accumulation_steps x dp``.

Not expressible: ring-attention context parallelism (DeepSpeed's Ulysses sequence
parallelism is another algorithm, which autotune does not model), Megatron-style
sequence parallelism, selective recompute, fp8 and interleaved pipelines.
"""

from __future__ import annotations

import json

import numpy as np

from ...training.plan import CATEGORIES
from . import shell
from .base import (HERE_SCRIPT, EmitContext, Emitter, Launch, Limit, header, launch_body, offload_threads,
                   refuse_token_dropping)
from .shell import Raw

RELEASE = "DeepSpeed 0.19.8"
CONFIG = "ds_config.json"
SCRIPT = "deepspeed_launch.sh"
ALTERNATIVES = "--format megatron or torchtitan"


def _code(key: str, value: str) -> int:
    return CATEGORIES[key].index(value)


def _limit(field: str, blocks, why) -> Limit:
    return Limit(field, lambda plans, model: np.asarray(blocks(plans), dtype=bool), why)


LIMITS = (
    _limit("cp", lambda p: p.cp > 1,
           lambda plan, model: f"plan field cp={plan.cp}: DeepSpeed has no ring-attention context parallelism "
           f"(Ulysses sequence parallelism is a different algorithm that autotune does not model); "
           f"use cp=1, or {ALTERNATIVES}"),
    _limit("vp", lambda p: p.vp > 1,
           lambda plan, model: f"plan field vp={plan.vp}: DeepSpeed's pipeline engine has no interleaved schedule; "
           f"use vp=1, or --format megatron or torchtitan"),
    _limit("sp", lambda p: p.sp,
           lambda plan, model: "plan field sp=true: DeepSpeed's AutoTP has no Megatron-style sequence parallelism; "
           "use sp=false (a --space whose rules set sp_with_tp: false), or --format megatron or torchtitan"),
    _limit("recompute", lambda p: p.recompute == _code("recompute", "selective"),
           lambda plan, model: "plan field recompute=selective: DeepSpeed checkpoints whole layers only; "
           "use recompute=full or none, or --format megatron or torchtitan"),
    _limit("precision", lambda p: (p.precision == _code("precision", "fp8")) | (p.precision == _code("precision", "fp4")),
           lambda plan, model: f"plan field precision={plan.precision}: DeepSpeed's config has no {plan.precision} "
           "training (it comes from Transformer Engine layers in the model code); use bf16, or --format megatron"
           + (" or torchtitan" if plan.precision == "fp8" else "")),
    _limit("zero", lambda p: (p.pp > 1) & (p.zero >= 2),
           lambda plan, model: f"plan fields pp={plan.pp}, zero={plan.zero}: DeepSpeed's pipeline engine allows "
           "ZeRO stage 0 or 1 only; use zero<=1 or pp=1, or --format megatron or torchtitan"),
    _limit("tp", lambda p: (p.pp > 1) & (p.tp > 1),
           lambda plan, model: f"plan fields tp={plan.tp}, pp={plan.pp}: AutoTP shards a Hugging Face model, "
           "and the pipeline engine needs a PipelineModule; DeepSpeed cannot combine them; "
           "use tp=1 or pp=1, or --format megatron or torchtitan"),
    _limit("ep", lambda p: (p.pp > 1) & (p.ep > 1),
           lambda plan, model: f"plan fields ep={plan.ep}, pp={plan.pp}: AutoEP works on a Hugging Face model, "
           "not on the pipeline engine's PipelineModule; use pp=1, or --format megatron"),
    _limit("etp", lambda p: (p.etp != p.tp) | ((p.ep > 1) & ((p.dp * p.cp) % p.ep != 0)),
           lambda plan, model: f"plan fields etp={plan.etp}, ep={plan.ep}: DeepSpeed's AutoEP forms its expert groups "
           "from data-parallel ranks and splits the experts like the rest of the model (no separate expert TP, "
           "no EP across the AutoTP ranks); use etp=tp with ep dividing dp*cp, or --format megatron"),
    # DeepSpeed's AutoEP documentation: "ZeRO compatibility: Stages 0, 1, and 2. Stage 3 is not supported" (its
    # partitioned-parameter APIs are outside AutoEP)
    _limit("zero", lambda p: (p.ep > 1) & (p.zero == 3),
           lambda plan, model: f"plan fields ep={plan.ep}, zero={plan.zero}: DeepSpeed's AutoEP supports ZeRO stages 0, "
           "1 and 2 only; use zero<=2 or ep=1, or --format megatron or torchtitan"),
    # deepspeed/runtime/engine.py _configure_tensor_parallel_states: AutoTP asserts ZeRO stage <= 2 at
    # deepspeed.initialize (later releases raise NotImplementedError for AutoTP + ZeRO-3 with an optimizer);
    # the AutoTP training tutorial lists stages 0, 1 and 2
    _limit("zero", lambda p: (p.tp > 1) & (p.zero == 3),
           lambda plan, model: f"plan fields tp={plan.tp}, zero={plan.zero}: DeepSpeed's AutoTP trains with ZeRO "
           "stages 0, 1 and 2 only (deepspeed.initialize refuses stage 3 with tensor_parallel.autotp_size > 1); "
           "use zero<=2 or tp=1, or --format megatron or torchtitan"),
    _limit("offload", lambda p: (p.ep > 1) & (p.tp > 1) & (p.offload == _code("offload", "cpu")),
           lambda plan, model: "plan field offload=cpu: DeepSpeed does not support optimizer offload with "
           "AutoEP and AutoTP together; use offload=none, or --format megatron"),
)


def ds_config(context: EmitContext) -> dict:
    """The DeepSpeed config as a mapping (``json.dumps`` of it is ``ds_config.json``)."""
    plan, model = context.plan, context.model
    config: dict = {
        "train_batch_size": context.global_batch,
        "train_micro_batch_size_per_gpu": plan.mbs,
        "gradient_accumulation_steps": context.accumulation,
        "gradient_clipping": 1.0,
        "steps_per_print": 10,
        "wall_clock_breakdown": False,
    }
    if plan.precision == "fp16":
        config["fp16"] = {"enabled": True, "loss_scale": 0, "initial_scale_power": 16}
    else:
        config["bf16"] = {"enabled": True}
    zero: dict = {"stage": plan.zero}
    if plan.zero >= 1:
        # DeepSpeed's defaults, which the deepspeed profile prices (dp_overlap 0; zero3_overlap for stage 3):
        # stages 1-2 reduce gradients after the backward, stage 3 overlaps its collectives
        zero.update({"overlap_comm": plan.zero == 3, "contiguous_gradients": True})
    if plan.zero == 3:
        zero["stage3_gather_16bit_weights_on_model_save"] = True
    if plan.offload == "cpu":
        zero["offload_optimizer"] = {"device": "cpu", "pin_memory": True}
    config["zero_optimization"] = zero
    config["optimizer"] = {
        "type": "AdamW",
        "params": {"lr": 1.0e-4, "betas": [0.9, 0.95], "eps": 1.0e-8, "weight_decay": 0.1},
    }
    if plan.recompute == "full":
        config["activation_checkpointing"] = {
            "partition_activations": False,
            "contiguous_memory_optimization": False,
            "cpu_checkpointing": False,
            "number_checkpoints": model.n_layers,
            "synchronize_checkpoint_boundary": False,
            "profile": False,
        }
    if plan.tp > 1:
        config["tensor_parallel"] = {"autotp_size": plan.tp}
    if plan.ep > 1:
        config["expert_parallel"] = {"enabled": True, "autoep_size": plan.ep, **autoep_router(model)}
    if plan.pp > 1:
        config["pipeline"] = {
            "partition": "parameters",
            "activation_checkpoint_interval": 1 if plan.recompute == "full" else 0,
        }
    return config


def autoep_router(model) -> dict:
    """The router as the spec states it, in AutoEP's keys (deepspeed/module_inject/auto_ep_config.py, AutoEPConfig:
    top_k, score_func, num_expert_groups / num_limited_groups, routed_scaling_factor, load_balance_coeff).  AutoEP
    would otherwise take them from the Hugging Face model's config ("auto"), except group-limited routing, which
    only its DeepSeek-V3 preset reads from there.  load_balance_coeff is null: AutoEP's expert-bias balancing is
    refused by its DeepSeek presets and was not how the softmax-routed models (Mixtral, Qwen3) were trained (their
    auxiliary loss is the Hugging Face model's own, router_aux_loss_coef)."""
    moe = model.moe
    if moe is None:
        return {}
    router: dict = {"top_k": moe.top_k, "score_func": moe.router_score}
    if moe.routing_groups > 1:
        router.update(num_expert_groups=moe.routing_groups, num_limited_groups=moe.routing_group_topk)
    if moe.router_topk_scaling is not None:
        router["routed_scaling_factor"] = moe.router_topk_scaling
    router["load_balance_coeff"] = None
    return router


def _model_notes(context: EmitContext) -> list[str]:
    """What builds the model but is not DeepSpeed's to set: the header says where it comes from."""
    model = context.model
    notes = []
    if model.position_embedding == "rope":
        theta = model.rope_theta
        rope = ("theta not stated in the spec" if theta is None
                else f"theta {theta:.0f}" if float(theta).is_integer() else f"theta {theta:g}")
        if model.rope_scaling is not None:
            rope += f", {model.rope_scaling} scaling"
        notes.append(f"RoPE ({rope}) is the model code's: ds_config.json has no model section, so the script's model "
                     "(a Hugging Face model: its config.json's rope_theta and rope_scaling) must carry it.")
    moe = model.moe
    if moe is not None and context.plan.ep > 1:
        notes.append(f"Router: AutoEP's expert_parallel section states top-{moe.top_k} {moe.router_score} routing"
                     + (f" within {moe.routing_group_topk} of {moe.routing_groups} groups" if moe.routing_groups > 1 else "")
                     + (f", weights scaled by {moe.router_topk_scaling:g}" if moe.router_topk_scaling is not None else "")
                     + "; AutoEP runs it dropless (no capacity factor).")
    if moe is not None and moe.router_expert_bias:
        notes.append(f"{model.name} balanced its experts with a per-expert bias (aux-loss-free); AutoEP does not run "
                     "it (load_balance_coeff null, as its DeepSeek presets require), so this run has no bias balancing.")
    elif moe is not None:
        notes.append("Load balancing: the model's own auxiliary loss (a Hugging Face model's router_aux_loss_coef, "
                     "with output_router_logits true); DeepSpeed's config sets no coefficient.")
    return notes


def _notes(context: EmitContext) -> tuple[str, ...]:
    plan = context.plan
    notes = [
        "The training script is yours: it calls deepspeed.initialize(args=args, model=model, ...) after",
        "deepspeed.add_config_arguments(parser), which reads --deepspeed and --deepspeed_config.",
    ]
    if plan.pp > 1:
        notes.append(f"Pipeline plan: the script wraps the layers in deepspeed.pipe.PipelineModule(layers, "
                     f"num_stages={plan.pp}) and trains with engine.train_batch().")
    if plan.recompute == "full":
        notes.append("Full recompute: checkpoint every layer (deepspeed.checkpointing.checkpoint, or "
                     "model.gradient_checkpointing_enable() for a Hugging Face model).")
    if plan.zero in (1, 2):
        notes.append("overlap_comm is false, DeepSpeed's default for ZeRO stages 1 and 2 and what the estimate prices "
                     "(gradients reduced after the backward); true overlaps the reduction with the backward, for "
                     "bucket memory the estimate does not count.")
    if plan.tp > 1 or plan.ep > 1:
        notes.append("AutoTP/AutoEP shard a Hugging Face model at deepspeed.initialize "
                     "(tensor_parallel.autotp_size, expert_parallel.autoep_size).")
    notes += _model_notes(context)
    return tuple(notes)


def launch(context: EmitContext) -> Launch:
    """What runs under torchrun (used by the Slurm script): the training script with its DeepSpeed flags."""
    exports = []
    if context.data_path is not None:
        exports.append(("DATA_PATH", context.data_path))
    if context.tokenizer is not None:
        exports.append(("TOKENIZER", context.tokenizer))
    notes = _notes(context)
    if context.data_path is not None or context.tokenizer is not None:
        notes += ("--data-path and --tokenizer reach the script as the environment variables DATA_PATH and TOKENIZER.",)
    exports += offload_threads(context)
    return Launch(
        program=(Raw('"${TRAIN_SCRIPT}"'),),
        arrays=(("DEEPSPEED_ARGS", (("--deepspeed",), ("--deepspeed_config", Raw('"${HERE}/ds_config.json"')))),),
        settings=(("TRAIN_SCRIPT", "train.py", "Your DeepSpeed training script."),),
        exports=tuple(exports),
        notes=notes,
    )


def launcher_groups(context: EmitContext) -> list[shell.Group]:
    """The ``deepspeed`` launcher (pdsh over the hosts of a hostfile)."""
    return [
        ("deepspeed",),
        ("--hostfile", Raw('"${HOSTFILE}"')),
        ("--num_nodes", context.nodes),
        ("--num_gpus", context.gpus_on_each_node),
        ("--master_addr", Raw('"${MASTER_ADDR}"')),
        ("--master_port", Raw('"${MASTER_PORT}"')),
        (Raw('"${TRAIN_SCRIPT}"'),),
        (Raw('"${DEEPSPEED_ARGS[@]}"'),),
        (Raw('"$@"'),),
    ]


def launch_script(context: EmitContext) -> str:
    run = launch(context)
    lines = ["#!/usr/bin/env bash"]
    lines += shell.comment_lines(header(RELEASE, context, run.notes))
    lines += shell.comment_lines([
        "",
        f"Run once, on the first node: the deepspeed launcher starts {context.gpus_on_each_node} processes on each of the",
        f"{context.nodes} node(s) listed in HOSTFILE (lines 'hostname slots={context.gpus_on_each_node}').",
    ])
    lines += ["set -euo pipefail", "", shell.assignment("HERE", HERE_SCRIPT)]
    lines += [shell.default_assignment("HOSTFILE", Raw('"${HERE}/hostfile"')),
              shell.default_assignment("MASTER_ADDR", Raw('"$(hostname)"')),
              shell.default_assignment("MASTER_PORT", 29500), ""]
    lines += launch_body(run)
    if env_file_lines(context):
        # the deepspeed launcher's pdsh runner passes on only a few variables (MLFLOW*, PYTHON*, MV2*, UCX*) and those
        # of the file DS_ENV_FILE names (deepspeed/launcher/runner.py), exported by the remote shell on each node
        lines += shell.comment_lines([f"{ENV_FILE}: what each node exports before its ranks start (the offload threads)."])
        lines += ["export " + shell.assignment("DS_ENV_FILE", Raw(f'"${{HERE}}/{ENV_FILE}"')), ""]
    lines += shell.command(launcher_groups(context))
    return "\n".join(lines) + "\n"


ENV_FILE = "deepspeed_env"


def env_file_lines(context: EmitContext) -> list[str]:
    """Lines of the DS_ENV_FILE for a plan over several nodes whose ranks need an environment the launcher does not
    pass on: OMP_NUM_THREADS for CPU Adam (base.offload_threads), evaluated by each node's shell."""
    if context.nodes < 2:
        return []
    # the value unquoted: the runner writes 'export NAME=VALUE;' into each node's command line
    return [f"{name}={str(value).strip(chr(34))}" for name, value in offload_threads(context)]


def render(context: EmitContext) -> dict[str, str]:
    # The emitted AutoEP config states no expert capacity, and autotune has not checked one there.
    refuse_token_dropping(context, "the DeepSpeed config autotune writes", "states no expert capacity (AutoEP)")
    files = {
        CONFIG: json.dumps(ds_config(context), indent=2) + "\n",
        SCRIPT: launch_script(context),
    }
    if env_file_lines(context):
        files[ENV_FILE] = "\n".join(env_file_lines(context)) + "\n"
    return files


EMITTER = Emitter(
    name="deepspeed",
    release=RELEASE,
    summary="ds_config.json and the deepspeed launch command",
    limits=LIMITS,
    render_files=render,
    launch=launch,
)
