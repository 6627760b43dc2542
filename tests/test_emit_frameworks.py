"""The frameworks' own parsers read what `autotune emit` writes (tests marked `frameworks`).

They need the frameworks, CPU builds, in an environment of their own:

    bash .ci/install-frameworks.sh
    .venv-frameworks/bin/python -m pytest -q -m frameworks tests/test_emit_frameworks.py

Each test skips, saying which package is missing, where a framework does not import.
What runs, per format:

* Megatron-LM core_r0.19: the emitted script runs with stub launchers; torchrun's own
  parser reads the torchrun arguments, then Megatron's ``add_megatron_arguments`` parses the
  training arguments and ``validate_args`` checks them.  Two device queries inside
  ``validate_args`` need a GPU (``get_device_arch_version`` with TP or CP,
  ``torch.cuda.get_device_capability`` with ``--moe-grouped-gemm``); the tests answer them
  as a Hopper GPU (compute capability 9.0) would.
* DeepSpeed 0.19.8: ``DeepSpeedConfig`` reads ds_config.json (with a data-parallel group of
  the plan's size), AutoEP's ``validate_autoep_config`` checks expert plans, and the
  ``deepspeed`` launcher's parser reads the launch command.
* torchtitan 0.3.0: ``ConfigManager`` loads the emitted config module as torchtitan's
  trainer does; ``ParallelDims`` checks the mesh against the world size and the pipeline
  metadata gives the stage count.  The float8 converter asks the GPU for SM 8.9; the
  tests answer yes.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import os
import socket
import sys
import typing
from pathlib import Path
from unittest import mock

import pytest
from test_emit_support import CASES, SLURM_FRAMEWORK, context_for, run_script

from autotune.inputs.hardware import load_hardware
from autotune.inputs.modelspec import load_model
from autotune.outputs.emit import EmitContext, render
from autotune.outputs.emit import torchtitan as titan_emitter
from autotune.training.plan import parse_plan

# The frameworks these tests feed: present in the environment that .ci/install-frameworks.sh
# builds (CI runs them there with AUTOTUNE_REQUIRE_FRAMEWORKS=1, so a missing one fails rather
# than skips); elsewhere the whole module is skipped by the marker below.
FRAMEWORK_MODULES = ("torch", "deepspeed", "torchtitan", "megatron.training")
MISSING = [m for m in FRAMEWORK_MODULES
           if importlib.util.find_spec(m.split(".")[0]) is None
           or ("." in m and importlib.util.find_spec(m) is None)]
REQUIRED = os.environ.get("AUTOTUNE_REQUIRE_FRAMEWORKS") == "1"
pytestmark = [
    pytest.mark.frameworks,
    pytest.mark.skipif(bool(MISSING) and not REQUIRED,
                       reason=f"not installed: {', '.join(MISSING)}; run .ci/install-frameworks.sh and use its environment"),
]


def need(module: str, why: str):
    """Import ``module`` (a failure to import is a test failure: the module-level marker skips earlier)."""
    return importlib.import_module(module)


def write(files: dict[str, str], folder: Path) -> None:
    for name, text in files.items():
        (folder / name).write_text(text)


# Plans beyond the goldens, to reach each mapping: (model, GPUs, sequence, global batch, plan).
EXTRA = [
    ("llama3-8b", 64, 8192, 256, "tp=2,pp=4,vp=2,sp=true,zero=1,mbs=2,recompute=full,precision=fp8"),
    ("llama3-8b", 64, 8192, 256, "tp=1,pp=1,zero=0,mbs=4,recompute=selective,precision=bf16"),
    ("llama3-8b", 64, 8192, 256, "tp=8,sp=true,zero=2,mbs=1,recompute=none,precision=bf16"),
    ("llama3-405b", 512, 8192, 1024, "tp=8,pp=8,sp=true,zero=1,mbs=1,recompute=full,precision=bf16,offload=cpu"),
    ("llama3-8b", 16, 4096, 64, "tp=1,pp=4,zero=1,mbs=2,recompute=full,precision=bf16"),
    ("mixtral-8x22b", 256, 4096, 1024, "tp=2,pp=4,vp=2,ep=8,sp=true,zero=1,mbs=1,recompute=selective,precision=fp8"),
    ("gpt3-175b", 1024, 2048, 1536, "tp=8,pp=16,vp=2,sp=true,zero=1,mbs=1,recompute=full,precision=fp16"),
    ("llama3-8b", 64, 8192, 256, "tp=2,sp=false,zero=3,mbs=2,recompute=full,precision=bf16,offload=cpu"),
    ("llama2-7b", 32, 4096, 512, "tp=1,pp=1,zero=2,mbs=4,recompute=none,precision=fp16"),
    ("mixtral-8x7b", 64, 4096, 512, "tp=2,sp=false,ep=4,zero=1,mbs=1,recompute=full,precision=bf16"),
    # Mixtures of experts torchtitan defines, with folding (etp=1) and MTP (DeepSeek-V3).
    ("deepseek-v3", 256, 4096, 1024, "pp=4,ep=32,zero=1,mbs=1,recompute=selective,precision=fp8"),
    ("qwen3-30b-a3b", 16, 4096, 64, "tp=2,etp=1,sp=true,ep=8,zero=1,mbs=1,recompute=full,precision=bf16"),
    ("gpt-oss-120b", 64, 4096, 256, "ep=8,zero=1,mbs=1,recompute=full,precision=bf16"),
    # CPU Adam over two nodes: the threads reach every node (DeepSpeed's DS_ENV_FILE)
    ("llama3-8b", 16, 4096, 64, "zero=2,mbs=1,recompute=full,precision=bf16,offload=cpu"),
    # RoPE on half of each head (--rotary-percent), sigmoid router with expert bias, MTP
    ("minimax-m2.5", 256, 4096, 256, "tp=4,pp=2,ep=8,sp=true,zero=1,mbs=1,recompute=full,precision=bf16"),
    # ZeRO-3 with CPU offload and no tensor parallelism (DeepSpeed's AutoTP refuses stage 3, so the tp=2 case above
    # no longer reaches DeepSpeed's config classes)
    ("llama3-8b", 64, 8192, 256, "tp=1,zero=3,mbs=2,recompute=full,precision=bf16,offload=cpu"),
    # fp8 parameters with the optimizer on the host: validate_args accepts the pair only under delayed scaling,
    # which the script runs in place of the MoE's blockwise recipe
    ("qwen3-30b-a3b", 64, 4096, 256, "tp=2,etp=1,sp=true,pp=4,ep=8,zero=1,mbs=1,recompute=full,precision=fp8,offload=cpu"),
    # NVFP4 on a GB200 rack, Megatron-Bridge's Llama-3.1 405B layout: 126 layers on pp 16 x vp 8 = 128 virtual stages,
    # the first and last holding the embedding and the loss alone (a --pipeline-model-parallel-layout)
    ("llama3-405b", 256, 8192, 1536, "tp=4,pp=16,vp=8,sp=true,zero=1,mbs=1,recompute=none,precision=fp4",
     "gb200-nvl72"),
]


def extra_context(index: int, **options) -> EmitContext:
    name, gpus, seq, batch, plan, *on = EXTRA[index]
    hardware = on[0] if on else "h100-sxm5-80gb"
    return EmitContext(plan=parse_plan(plan, gpus), model=load_model(name), hardware=hardware,
                       gpus_per_node=load_hardware(hardware).gpus_per_node, seq_len=seq, global_batch=batch, **options)


def all_contexts(framework: str) -> list[tuple[str, EmitContext]]:
    out = [(case, context_for(case)) for case in sorted(CASES)]
    out += [(f"extra{i}", extra_context(i)) for i in range(len(EXTRA))]
    from autotune.outputs.emit import FRAMEWORKS

    if framework == "megatron":  # token dropping (--moe-capacity-factor): Megatron's flags only
        qwen = next(i for i, e in enumerate(EXTRA) if e[0] == "qwen3-30b-a3b")
        out.append(("capacity", extra_context(qwen, moe_capacity_factor=1.25)))
    emitter = FRAMEWORKS[framework]
    return [(name, ctx) for name, ctx in out if not emitter.can_express(ctx.plan, ctx.model, ctx)]


def _ids(framework):
    return [name for name, _ in all_contexts(framework)]


def torchrun_args(argv: list[str]) -> argparse.Namespace:
    run = need("torch.distributed.run", "torchrun's own parser")
    return run.get_args_parser().parse_args(argv)


# --- Megatron-LM ---------------------------------------------------------------------------

@pytest.fixture(scope="module")
def megatron_arguments():
    need("torch", "Megatron-LM needs torch")
    if not hasattr(typing, "override"):  # the 0.19.2 wheel is written for Python >= 3.12
        import typing_extensions

        typing.override = typing_extensions.override
    return importlib.import_module("megatron.training.arguments")


@pytest.mark.parametrize("name", _ids("megatron"))
def test_megatron_parser_and_validation_accept_the_script(megatron_arguments, tmp_path, name, capsys):
    import torch

    context = dict(all_contexts("megatron"))[name]
    files = render("megatron", context)
    write(files, tmp_path)
    call = run_script(tmp_path / "megatron_pretrain_gpt.sh", tmp_path)[-1]
    launch = torchrun_args(call["argv"])
    assert int(launch.nnodes) * int(launch.nproc_per_node) == context.n_gpus
    assert launch.rdzv_backend == "c10d" and launch.training_script.endswith("/pretrain_gpt.py")

    A = megatron_arguments
    parser = A.add_megatron_arguments(argparse.ArgumentParser(allow_abbrev=False))
    args = parser.parse_args(launch.training_script_args)
    args.rank, args.world_size = 0, context.n_gpus
    env = {k: v for k, v in call["env"].items() if k == "CUDA_DEVICE_MAX_CONNECTIONS"}
    # the GPU the plan runs on (Blackwell for NVFP4); TransformerEngine, which --fp4-format needs at 2.7 or later, is
    # part of the node's environment, not of the flags, and is not installed here
    blackwell = context.plan.precision == "fp4"
    arch = (10, 0) if blackwell else (9, 0)
    with mock.patch.dict(os.environ, env), mock.patch.object(A, "get_device_arch_version", return_value=arch[0]), \
            mock.patch.object(torch.cuda, "get_device_capability", return_value=arch), \
            mock.patch.object(A, "is_te_min_version", side_effect=(lambda *a, **k: True) if blackwell
                              else A.is_te_min_version):
        if not env:
            os.environ.pop("CUDA_DEVICE_MAX_CONNECTIONS", None)
        A.validate_args(args, {})
    plan, model = context.plan, context.model
    assert args.data_parallel_size == plan.dp
    assert (args.tensor_model_parallel_size, args.pipeline_model_parallel_size, args.context_parallel_size) == (
        plan.tp, plan.pp, plan.cp)
    assert (args.virtual_pipeline_model_parallel_size or 1) == plan.vp
    assert args.sequence_parallel == plan.sp
    assert (args.micro_batch_size, args.global_batch_size) == (plan.mbs, context.global_batch)
    assert (args.num_layers, args.hidden_size, args.num_attention_heads) == (model.n_layers, model.hidden_size, model.n_heads)
    if args.group_query_attention:
        assert args.num_query_groups == model.n_kv_heads < model.n_heads
    else:
        assert model.n_kv_heads == model.n_heads
    assert args.use_distributed_optimizer == (plan.zero >= 1)
    assert args.bf16 == (plan.precision in ("bf16", "fp8", "fp4")) and args.fp16 == (plan.precision == "fp16")
    assert (args.fp8 is not None) == (plan.precision == "fp8")
    assert (args.fp4 is not None) == (plan.precision == "fp4")
    if plan.precision == "fp4":
        assert (args.fp4, args.fp4_recipe, args.fp4_param_gather) == ("e2m1", "nvfp4", False)
    # fp8 parameters under the distributed optimizer, as the estimate counts them (framework fp8_param_gather)
    assert bool(args.fp8_param_gather) == (plan.precision == "fp8" and plan.zero == 1)
    if model.moe:
        assert (args.num_experts, args.moe_router_topk, args.expert_model_parallel_size) == (
            model.moe.n_experts, model.moe.top_k, plan.ep)
        assert args.expert_tensor_parallel_size == plan.etp
        # The expert mapping validate_args does not check (parallel_state.initialize_model_parallel):
        # etp * ep * pp divides the world.
        assert context.n_gpus % (args.expert_tensor_parallel_size * args.expert_model_parallel_size
                                 * args.pipeline_model_parallel_size) == 0
        assert args.moe_ffn_hidden_size == model.moe.expert_ffn_hidden_size
        if model.moe.routing_groups > 1:
            assert (args.moe_router_num_groups, args.moe_router_group_topk) == (
                model.moe.routing_groups, model.moe.routing_group_topk)
        if context.moe_capacity_factor is not None:
            assert args.moe_expert_capacity_factor == context.moe_capacity_factor
            assert args.moe_pad_expert_input_to_capacity and args.moe_token_dispatcher_type == "alltoall"
        else:
            assert args.moe_expert_capacity_factor is None
        if args.overlap_moe_expert_parallel_comm:  # TransformerConfig's rules for the batch-level overlap
            assert args.moe_token_dispatcher_type in ("alltoall", "flex") and plan.ep > 1
            assert plan.pp == 1 or args.virtual_pipeline_model_parallel_size
            assert args.recompute_granularity != "full" and (args.mtp_num_layers or 0) <= 1
    if model.mla is not None:
        mla = model.mla
        assert args.multi_latent_attention
        assert (args.q_lora_rank, args.kv_lora_rank, args.qk_head_dim, args.qk_pos_emb_head_dim, args.v_head_dim) == (
            mla.q_lora_rank, mla.kv_lora_rank, mla.qk_nope_head_dim, mla.qk_rope_head_dim, mla.v_head_dim)
    assert (args.mtp_num_layers or 0) == model.mtp_layers
    # the attention biases and the share of each head RoPE rotates are the checkpoint's
    # (GPT-3's biased linear layers: Megatron's default, which implies the q/k/v ones)
    assert args.add_qkv_bias == (model.attention_bias != "none" or model.mlp != "swiglu")
    assert args.add_bias_linear == (model.mlp != "swiglu")
    assert args.rotary_percent == (model.rotary_percent or 1.0)
    if args.pipeline_model_parallel_layout is not None:
        # What TransformerConfig checks of a layout: embedding first, loss last, every decoder and MTP
        # layer once, MTP after the decoder layers in the last virtual stage of its rank.
        from megatron.core.transformer.pipeline_parallel_layer_layout import (
            PipelineParallelLayerLayout,
        )

        layout = PipelineParallelLayerLayout(args.pipeline_model_parallel_layout, args.pipeline_model_parallel_size)
        layout.validate_layer_layout(args.num_layers, args.mtp_num_layers)
    if args.recompute_modules and "layernorm" in args.recompute_modules:
        assert args.fp8_recipe != "delayed"  # TransformerConfig refuses layernorm recompute with delayed fp8
    assert args.recompute_granularity == (None if plan.recompute == "none" else plan.recompute)
    capsys.readouterr()  # validate_args prints every argument


# --- DeepSpeed -----------------------------------------------------------------------------

class _DataParallelGroup:
    """What DeepSpeedConfig asks of a model-parallel unit: the data-parallel size."""

    def __init__(self, size: int):
        self.size = size

    def get_data_parallel_world_size(self) -> int:
        return self.size


@pytest.fixture(scope="module")
def deepspeed_single_rank():
    deepspeed = need("deepspeed", "DeepSpeed's config classes")
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = dict(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK="0", WORLD_SIZE="1", LOCAL_RANK="0")
    with mock.patch.dict(os.environ, env):
        # One process on the loopback: DeepSpeedConfig reads the data-parallel size only once
        # torch.distributed is up.
        deepspeed.init_distributed(dist_backend="gloo")
        yield deepspeed


@pytest.mark.parametrize("name", _ids("deepspeed"))
def test_deepspeed_config_classes_accept_ds_config(deepspeed_single_rank, tmp_path, name):
    from deepspeed.runtime.config import DeepSpeedConfig

    context = dict(all_contexts("deepspeed"))[name]
    files = render("deepspeed", context)
    write(files, tmp_path)
    plan = context.plan
    config = DeepSpeedConfig(str(tmp_path / "ds_config.json"), mpu=_DataParallelGroup(plan.dp))
    assert config.world_size == plan.dp
    assert (config.train_batch_size, config.train_micro_batch_size_per_gpu, config.gradient_accumulation_steps) == (
        context.global_batch, plan.mbs, context.accumulation)
    assert config.zero_optimization_stage == plan.zero
    assert (config.zero_config.offload_optimizer is not None) == (plan.offload == "cpu")
    assert config.bfloat16_config.enabled == (plan.precision == "bf16")
    assert config.tensor_parallel_config.autotp_size in ((0, 1) if plan.tp == 1 else (plan.tp,))
    assert config.expert_parallel_config.enabled == (plan.ep > 1)
    if plan.ep > 1:
        from deepspeed.module_inject.auto_ep_config import validate_autoep_config

        assert config.expert_parallel_config.autoep_size == plan.ep
        # the router the spec states, in AutoEP's keys (top_k, score_func, groups, scaling; no expert-bias balancing)
        from autotune.outputs.emit.deepspeed import autoep_router

        router, parsed = autoep_router(context.model), config.expert_parallel_config
        assert (parsed.top_k, parsed.score_func, parsed.load_balance_coeff) == (router["top_k"], router["score_func"], None)
        assert parsed.num_expert_groups == router.get("num_expert_groups")
        validate_autoep_config(config.expert_parallel_config, world_size=context.n_gpus, pp_size=plan.pp,
                               tp_size=plan.tp, sp_size=1, zero_stage=plan.zero,
                               zero_offload_optimizer=plan.offload == "cpu")
    if plan.recompute == "full":
        assert config.activation_checkpointing_config.number_checkpoints == context.model.n_layers
    if plan.pp > 1:
        assert config.pipeline["activation_checkpoint_interval"] == (1 if plan.recompute == "full" else 0)


@pytest.mark.parametrize("name", _ids("deepspeed"))
def test_deepspeed_launcher_parses_the_command(tmp_path, name):
    runner = need("deepspeed.launcher.runner", "the deepspeed launcher's parser")
    context = dict(all_contexts("deepspeed"))[name]
    write(render("deepspeed", context), tmp_path)
    call = run_script(tmp_path / "deepspeed_launch.sh", tmp_path)[-1]
    assert call["prog"] == "deepspeed"
    args = runner.parse_args(call["argv"])
    assert args.num_nodes * args.num_gpus == context.n_gpus
    assert args.user_script == "train.py"
    assert args.user_args == ["--deepspeed", "--deepspeed_config", str(tmp_path / "ds_config.json")]


def test_deepspeed_runner_exports_the_offload_threads_to_every_node(tmp_path):
    """An offload plan over several nodes: DeepSpeed's pdsh runner passes on only a few variables, so the threads
    for CPU Adam go through the file DS_ENV_FILE names; the runner's own reading of it, run by a node's shell,
    gives the node's cores over its ranks."""
    import subprocess

    need("deepspeed.launcher.runner", "the deepspeed launcher")
    from deepspeed.launcher.multinode_runner import MultiNodeRunner

    index = next(i for i, e in enumerate(EXTRA) if "offload=cpu" in e[4] and "tp=" not in e[4])
    context = extra_context(index)
    files = render("deepspeed", context)
    write(files, tmp_path)
    call = run_script(tmp_path / "deepspeed_launch.sh", tmp_path)[-1]
    env_file = Path(call["env"]["DS_ENV_FILE"])
    assert env_file == tmp_path / "deepspeed_env" and context.nodes > 1

    class Runner(MultiNodeRunner):  # the base class's add_export, as the pdsh runner builds its exports
        def backend_exists(self):
            return True

        def get_cmd(self, environment, active_resources):
            return []

    runner = Runner(argparse.Namespace(user_script="train.py", user_args=[]), "")
    for line in env_file.read_text().splitlines():
        key, value = line.split("=", maxsplit=1)
        runner.add_export(key, value)
    exports = "".join(f"export {k}={v}; " for k, v in runner.exports.items())
    shell = subprocess.run(["bash", "-c", f"nproc() {{ echo 96; }}; {exports} echo $OMP_NUM_THREADS"],
                           capture_output=True, text=True, check=True)
    assert shell.stdout.strip() == str(96 // context.gpus_on_each_node)


# --- torchtitan ----------------------------------------------------------------------------

def load_titan_config(folder: Path):
    need("torchtitan.config", "torchtitan's config loading")
    from torchtitan.config import ConfigManager

    sys.modules.pop(titan_emitter.MODULE, None)
    sys.path.insert(0, str(folder))
    try:
        float8 = importlib.import_module("torchtitan.components.quantization.float8")
        with mock.patch.object(float8, "has_cuda_capability", return_value=True):
            return ConfigManager().parse_args(["--module", titan_emitter.MODULE, "--config", titan_emitter.FUNCTION])
    finally:
        sys.path.remove(str(folder))
        sys.modules.pop(titan_emitter.MODULE, None)


@pytest.mark.parametrize("name", _ids("torchtitan"))
def test_torchtitan_loads_the_config_module(tmp_path, name):
    context = dict(all_contexts("torchtitan"))[name]
    files = render("torchtitan", context)
    write(files, tmp_path)
    config = load_titan_config(tmp_path)
    from torchtitan.distributed.parallel_dims import ParallelDims

    plan, model = context.plan, context.model
    dims = ParallelDims.from_config(config.parallelism, context.n_gpus)  # checks the mesh fills the world
    assert dims.dp_replicate * dims.dp_shard == plan.dp
    assert (dims.tp, dims.cp, dims.pp) == (plan.tp, plan.cp, plan.pp)
    assert config.parallelism.enable_sequence_parallel == plan.sp
    local, total = config.training.local_batch_size, config.training.global_batch_size
    assert total == context.global_batch and total % (local * plan.dp) == 0 and config.training.seq_len == context.seq_len
    if plan.pp > 1:
        from torchtitan.distributed.pipeline_parallel import _get_pipeline_metadata

        stages, layers, _, _ = _get_pipeline_metadata(dims, config.parallelism, config.model_spec.model)
        assert (stages, layers) == (plan.pp * plan.vp, model.n_layers)
        assert local // config.parallelism.pipeline_parallel_microbatch_size == context.accumulation
    kind = type(config.activation_checkpoint).__qualname__ if config.activation_checkpoint is not None else None
    assert kind == {"none": None, "full": "FullAC.Config", "selective": "SelectiveAC.Config"}[plan.recompute]
    if model.moe:  # the converters rewrote the linear and grouped-expert configs
        assert ("Float8" in repr(config.model_spec.model)) == (plan.precision == "fp8")
        assert config.parallelism.expert_parallel_degree == plan.ep and plan.etp == 1
        assert config.training.disable_cuda_graphs == (plan.ep > 1 or plan.pp > 1)
    else:
        first_linear = config.model_spec.model.layers[0].feed_forward.w1
        assert ("Float8" in type(first_linear).__qualname__) == (plan.precision == "fp8")
    # The launch script: torchrun's parser, and the config module on PYTHONPATH.
    call = run_script(tmp_path / titan_emitter.SCRIPT, tmp_path)[-1]
    launch = torchrun_args(call["argv"])
    assert int(launch.nnodes) * int(launch.nproc_per_node) == context.n_gpus and launch.module
    assert launch.training_script == "torchtitan.train"
    assert call["env"]["PYTHONPATH"].split(os.pathsep)[0] == str(tmp_path)


@pytest.mark.parametrize("flavour", sorted(titan_emitter.FLAVOURS))
def test_torchtitan_flavour_table_matches_the_package(flavour):
    need("torchtitan.models.llama3", "torchtitan's model registry")
    from torchtitan.models.llama3 import model_registry

    model = model_registry(flavour).model
    attention = model.layers[0].attention
    shape = titan_emitter.FLAVOURS[flavour]
    assert len(model.layers) == shape["n_layers"] and model.dim == shape["hidden_size"]
    assert (attention.n_heads, attention.n_kv_heads) == (shape["n_heads"], shape["n_kv_heads"])
    assert (attention.head_dim or model.dim // attention.n_heads) == shape["head_dim"]
    assert model.layers[0].feed_forward.w1.out_features == shape["ffn_hidden_size"]
    assert model.vocab_size == shape["vocab_size"]
    assert bool(getattr(model, "enable_weight_tying", False)) == shape["tied_embeddings"]


@pytest.mark.parametrize("name", sorted(titan_emitter.MOE_MODELS))
def test_torchtitan_moe_models_match_the_package(name):
    entry = titan_emitter.MOE_MODELS[name]
    registry = importlib.import_module(f"torchtitan.models.{entry['package']}").model_registry
    model = registry(entry["flavour"]).model
    spec = load_model(name)
    assert len(model.layers) == spec.n_layers and model.dim == spec.hidden_size
    assert model.vocab_size == spec.vocab_size
    moe_layer = model.layers[-1]
    moe = getattr(moe_layer, "moe", None) or getattr(moe_layer, "feed_forward", None)
    text = repr(moe) + repr(moe_layer)
    assert str(spec.moe.n_experts) in text and str(spec.moe.expert_ffn_hidden_size) in text


# --- Slurm: torchrun's parser on the command srun runs ------------------------------------------

@pytest.mark.parametrize("case", sorted(CASES))
def test_slurm_script_runs_a_parsable_torchrun(tmp_path, case):
    context = context_for(case, framework=SLURM_FRAMEWORK[case])
    write(render("slurm", context), tmp_path)
    call = run_script(tmp_path / "launch.sbatch", tmp_path)[-1]
    assert call["prog"] == "srun"
    launch = torchrun_args(call["argv"][call["argv"].index("torchrun") + 1:])
    assert int(launch.nnodes) == context.nodes and int(launch.nproc_per_node) == context.gpus_on_each_node
    assert launch.rdzv_endpoint == f"node-a:{call['env']['MASTER_PORT']}" and launch.rdzv_id == "4242"
