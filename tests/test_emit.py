"""`autotune emit`: golden files per format, refusals, batch and world-size arithmetic, and the CLI.

Goldens live in tests/golden/emit/<case>/<format>/; a format that cannot express a
case has REFUSED.txt there instead.  Regenerate them after an intended change with
AUTOTUNE_UPDATE_GOLDEN=1 python -m pytest tests/test_emit.py
"""

from __future__ import annotations

import ast
import json
import math
import os
import re
import tempfile
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_emit_support import CASES, GOLDEN, SLURM_FRAMEWORK, context_for, run_script

from autotune.errors import InputError
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import TrainWorkload
from autotune.outputs.emit import (
    FORMATS,
    FRAMEWORKS,
    EmitContext,
    get_emitter,
    megatron,
    render,
    torchtitan,
)
from autotune.outputs.emit import deepspeed as ds
from autotune.outputs.emit.megatron import pipeline_split
from autotune.training.plan import PlanBatch, parse_plan
from autotune.training.space import Rules, axis_choices, enumerate_valid, load_space

UPDATE = os.environ.get("AUTOTUNE_UPDATE_GOLDEN") == "1"


# --- golden files -------------------------------------------------------------------------

def _outputs(case: str, fmt: str) -> dict[str, str]:
    context = context_for(case, framework=SLURM_FRAMEWORK[case] if fmt == "slurm" else "megatron")
    try:
        return render(fmt, context)
    except InputError as exc:
        return {"REFUSED.txt": str(exc) + "\n"}


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("case", sorted(CASES))
def test_golden(case, fmt):
    files = _outputs(case, fmt)
    folder = GOLDEN / case / fmt
    if UPDATE:
        folder.mkdir(parents=True, exist_ok=True)
        for stale in folder.iterdir():
            stale.unlink()
        for name, text in files.items():
            (folder / name).write_text(text)
    expected = {p.name: p.read_text() for p in sorted(folder.iterdir())}
    assert sorted(files) == sorted(expected), "files differ; regenerate with AUTOTUNE_UPDATE_GOLDEN=1 if intended"
    for name in files:
        assert files[name] == expected[name], f"{case}/{fmt}/{name} differs from its golden file"


def test_goldens_cover_each_format_at_least_once():
    for fmt in FORMATS:
        written = [case for case in CASES if "REFUSED.txt" not in _outputs(case, fmt)]
        assert written, f"no golden case is expressible in {fmt}"


def test_goldens_hold_no_machine_paths():
    # The folder holding this checkout, the home folder and the temp folder must not leak into configs.
    local = {str(Path(__file__).resolve().parents[2]), str(Path.home()), tempfile.gettempdir()}
    for path in GOLDEN.rglob("*"):
        if path.is_file():
            text = path.read_text()
            assert not [p for p in local if p + "/" in text], path


# --- consistency properties ---------------------------------------------------------------

def _megatron_value(argv: list[str], flag: str, default=None):
    return argv[argv.index(flag) + 1] if flag in argv else default


def check_megatron(context: EmitContext) -> None:
    argv = [str(a) for a in megatron.launch(context).argv()[1:]]
    plan = context.plan
    tp, pp, cp = (int(_megatron_value(argv, f)) for f in
                  ("--tensor-model-parallel-size", "--pipeline-model-parallel-size", "--context-parallel-size"))
    world = context.nodes * context.gpus_on_each_node
    assert world == context.n_gpus == tp * pp * cp * plan.dp
    dp = world // (tp * pp * cp)
    mbs, gbs = int(_megatron_value(argv, "--micro-batch-size")), int(_megatron_value(argv, "--global-batch-size"))
    assert gbs % (mbs * dp) == 0 and gbs // (mbs * dp) == context.accumulation
    layout = _megatron_value(argv, "--pipeline-model-parallel-layout")
    if layout is None:
        assert int(_megatron_value(argv, "--num-virtual-stages-per-pipeline-rank", 1)) == plan.vp
    else:  # the layout sets the virtual stages, and every rank holds at most the blocks the cost model priced
        stages = layout.split("|")
        assert len(stages) == pp * plan.vp and layout.startswith("E") and layout.endswith("L")
        blocks = context.model.n_layers + context.model.mtp_layers
        assert layout.count("t") == context.model.n_layers and layout.count("m") == context.model.mtp_layers
        per_rank = [sum(stages[c * pp + r].count("t") + stages[c * pp + r].count("m") for c in range(plan.vp))
                    for r in range(pp)]
        assert max(per_rank) == -(-blocks // pp), per_rank
    first = _megatron_value(argv, "--decoder-first-pipeline-num-layers")
    if first is not None:
        last = int(_megatron_value(argv, "--decoder-last-pipeline-num-layers"))
        middle = context.model.n_layers - int(first) - last
        assert pp > 2 or middle == 0
        if pp > 2:
            assert middle % (pp - 2) == 0 and (middle // (pp - 2)) % plan.vp == 0
        assert int(first) % plan.vp == 0 and last % plan.vp == 0
    if context.model.moe:
        ep = int(_megatron_value(argv, "--expert-model-parallel-size"))
        etp = int(_megatron_value(argv, "--expert-tensor-parallel-size"))
        # Megatron-Core's expert mapping: etp*ep divides the ranks of a stage (MoE parallel folding).
        assert ep == plan.ep and etp == plan.etp and (tp * dp * cp) % (etp * ep) == 0
    assert ("--sequence-parallel" in argv) == plan.sp
    assert len(argv) == len(set(a for a in argv if a.startswith("--"))) + sum(1 for a in argv if not a.startswith("--"))


def check_deepspeed(context: EmitContext) -> None:
    config = ds.ds_config(context)
    plan = context.plan
    assert config["train_batch_size"] == (
        config["train_micro_batch_size_per_gpu"] * config["gradient_accumulation_steps"] * plan.dp)
    assert config["train_batch_size"] == context.global_batch
    assert config["zero_optimization"]["stage"] == plan.zero
    assert config.get("tensor_parallel", {}).get("autotp_size", 1) == plan.tp
    assert config.get("expert_parallel", {}).get("autoep_size", 1) == plan.ep
    assert ("offload_optimizer" in config["zero_optimization"]) == (plan.offload == "cpu")
    json.dumps(config)


def check_torchtitan(context: EmitContext) -> None:
    values = dict(torchtitan.settings(context))
    plan = context.plan
    p = "parallelism."
    dp = values[p + "data_parallel_replicate_degree"] * values[p + "data_parallel_shard_degree"]
    assert dp == plan.dp
    world = dp * values[p + "tensor_parallel_degree"] * values[p + "context_parallel_degree"] * values[p + "pipeline_parallel_degree"]
    assert world == context.n_gpus == context.nodes * context.gpus_on_each_node
    local, total = values["training.local_batch_size"], values["training.global_batch_size"]
    assert total == context.global_batch and total % (local * dp) == 0
    if plan.pp > 1:
        micro = values[p + "pipeline_parallel_microbatch_size"]
        assert local * dp == total and local % micro == 0 and local // micro == context.accumulation
        per_stage = values[p + "pipeline_parallel_layers_per_stage"]
        assert math.ceil(context.model.n_layers / per_stage) == plan.pp * plan.vp
    else:
        assert local == plan.mbs and total // (local * dp) == context.accumulation


CHECKS = {"megatron": check_megatron, "deepspeed": check_deepspeed, "torchtitan": check_torchtitan}

# (model, hardware, GPUs, sequence, global batch): dense, MoE, a torchtitan flavour, GQA with odd layer counts.
SETUPS = [
    ("gpt3-175b", "a100-sxm4-80gb", 256, 2048, 1536),
    ("mixtral-8x7b", "h100-sxm5-80gb", 64, 4096, 512),
    ("llama3-8b", "h100-sxm5-80gb", 64, 8192, 256),
    ("llama3-405b", "h100-sxm5-80gb", 512, 8192, 1024),
]


def _valid_plans(setup) -> tuple:
    name, hardware, gpus, seq, batch = setup
    model = load_model(name)
    cluster = Cluster(load_hardware(hardware), gpus, 8)
    workload = TrainWorkload(seq_len=seq, global_batch=batch)
    space = load_space(None)
    rules = Rules(tp_within_node=True, uneven_pipeline=True, sp_with_tp=False)
    plans = enumerate_valid(model, cluster, workload, axis_choices(space, model, cluster, workload), rules).plans
    return model, cluster, workload, plans


_ENUMERATED = {}


def enumerated(index: int):
    if index not in _ENUMERATED:
        _ENUMERATED[index] = _valid_plans(SETUPS[index])
    return _ENUMERATED[index]


@settings(max_examples=150, deadline=None)
@given(setup=st.integers(0, len(SETUPS) - 1), pick=st.integers(0, 10**9))
def test_every_expressible_plan_renders_consistently(setup, pick):
    model, cluster, workload, plans = enumerated(setup)
    plan = plans.plan(pick % len(plans))
    context = EmitContext(plan=plan, model=model, hardware=cluster.hardware.name, gpus_per_node=8,
                          seq_len=workload.seq_len, global_batch=workload.global_batch)
    for name, emitter in FRAMEWORKS.items():
        if emitter.can_express(plan, model, context):
            with pytest.raises(InputError, match="cannot express"):
                render(name, context)
            continue
        files = render(name, context)
        assert files and all(text.endswith("\n") for text in files.values())
        CHECKS[name](context)


@pytest.mark.parametrize("index", range(len(SETUPS)))
@pytest.mark.parametrize("fmt", list(FRAMEWORKS) + ["slurm"])
def test_search_mask_agrees_with_can_express(index, fmt):
    from autotune.outputs.emit.formats import expressible_mask

    model, _, _, plans = enumerated(index)
    sample = plans.take(np.arange(0, len(plans), max(1, len(plans) // 300)))
    mask = expressible_mask(fmt, sample, model)
    emitter = get_emitter(fmt)
    for i in range(len(sample)):
        assert bool(mask[i]) == (not emitter.can_express(sample.plan(i), model)), sample.plan(i).as_string()


# --- refusals -------------------------------------------------------------------------------

@pytest.mark.parametrize("fmt, plan, field", [
    ("deepspeed", "tp=4,cp=16,zero=3", "cp=16"),
    ("deepspeed", "tp=2,pp=4,vp=2,sp=false,zero=1", "vp=2"),
    ("deepspeed", "tp=2,sp=true,zero=1", "sp=true"),
    ("deepspeed", "pp=4,zero=2", "zero=2"),
    ("deepspeed", "recompute=selective,zero=1", "recompute=selective"),
    ("deepspeed", "precision=fp8,zero=1", "precision=fp8"),
    ("torchtitan", "zero=1,offload=cpu", "offload=cpu"),
    ("torchtitan", "zero=1,precision=fp16", "precision=fp16"),
])
def test_refusal_names_the_plan_field_and_alternatives(fmt, plan, field):
    context = context_for("longseq", plan=plan, seq_len=8192, global_batch=1024)
    with pytest.raises(InputError) as info:
        render(fmt, context)
    message = str(info.value)
    assert f"plan field {field}" in message or "plan fields" in message and field in message
    assert "--format" in message and "Formats that can express it: megatron" in message


def test_torchtitan_refuses_a_model_it_has_no_code_for():
    with pytest.raises(InputError, match=r"gpt3-175b .*mlp=gelu.*norm=layernorm.*use --format megatron"):
        render("torchtitan", context_for("gpt3"))


def test_torchtitan_refuses_a_sequence_beyond_its_rope_cache():
    context = context_for("longseq", plan="tp=4,cp=16,zero=3", seq_len=262144, global_batch=32)
    assert torchtitan.EMITTER.can_express(context.plan, context.model) == []
    with pytest.raises(InputError, match="seq_len=262144"):
        render("torchtitan", context)


def test_slurm_refuses_what_its_framework_refuses():
    context = context_for("longseq", framework="deepspeed")
    with pytest.raises(InputError, match="cp=16"):
        render("slurm", context)
    assert "launch.sbatch" in render("slurm", context_for("longseq", framework="megatron"))


def test_megatron_refuses_alibi():
    import dataclasses

    context = context_for("gpt3")
    context = dataclasses.replace(context, model=dataclasses.replace(context.model, position_embedding="alibi"))
    with pytest.raises(InputError, match="position_embedding=alibi"):
        render("megatron", context)


# The last rank gets the lighter load (it also computes the logits and loss), as the cost model splits.
# The flags give the cost model's split or none (the layout then does): 56 layers over 16 ranks were (7, 7) with
# 3 on each middle rank, 126 over 16 with vp 3 (21, 21) with 6: peaks of 7 and 21 where 4 and 8 were priced.
@pytest.mark.parametrize("layers, pp, vp, expected", [
    (96, 8, 4, False), (80, 8, 1, False), (126, 8, 1, (16, 14)), (126, 2, 1, False), (61, 4, 1, (16, 13)),
    (32, 4, 3, None), (56, 16, 1, None), (30, 4, 2, (8, 6)), (126, 16, 3, None), (94, 8, 4, None),
])
def test_megatron_uneven_pipeline_split(layers, pp, vp, expected):
    split = pipeline_split(layers, pp, vp)
    assert split == expected
    if split:
        first, last = split
        middle = layers - first - last
        assert first % vp == 0 and last % vp == 0 and first > 0 and last > 0
        assert (pp == 2 and middle == 0) or (middle % (pp - 2) == 0 and (middle // (pp - 2)) % vp == 0)
        assert first == -(-layers // pp)  # the fullest rank is the one the cost model priced


@pytest.mark.parametrize("layers, pp, vp, per_rank", [
    (126, 16, 3, [8] * 15 + [6]), (94, 8, 4, [12] * 7 + [10]), (56, 16, 1, [4] * 8 + [3] * 8), (32, 4, 3, [8] * 4),
])
def test_megatron_layout_splits_the_layers_as_priced(layers, pp, vp, per_rank):
    """Hand-checked per-rank counts: ceil(L/pp) on every rank but the last (the rest), or ceil and floor when that
    would leave the last rank less than nothing; each rank's layers over its vp virtual stages."""
    import dataclasses

    from autotune.outputs.emit.megatron import pipeline_layout

    model = dataclasses.replace(load_model("llama3-8b"), n_layers=layers)
    layout = pipeline_layout(model, pp, vp)
    stages = layout.split("|")
    assert len(stages) == pp * vp and layout.startswith("E") and layout.endswith("L")
    assert [sum(stages[c * pp + r].count("t") for c in range(vp)) for r in range(pp)] == per_rank


def test_context_rejects_a_batch_that_does_not_multiply_out():
    with pytest.raises(InputError, match="global_batch"):
        context_for("gpt3", global_batch=1000)


# --- safety: nothing a user types can run as a command ------------------------------------

NASTY = "evil $(touch PWNED1) `touch PWNED2` \"dq\" 'sq' ; touch PWNED3 & echo $HOME\nnewline; touch PWNED4"


def _nasty_context(case: str, framework: str = "megatron", tmp_path: Path | None = None):
    import dataclasses

    context = context_for(case, framework=framework)
    model = dataclasses.replace(context.model, name=NASTY)
    return dataclasses.replace(context, model=model, data_path="my data/" + NASTY, tokenizer="tok " + NASTY)


@pytest.mark.parametrize("case, fmt, framework", [
    ("gpt3", "megatron", "megatron"), ("mixtral", "deepspeed", "megatron"), ("longseq", "torchtitan", "megatron"),
    ("gpt3", "slurm", "megatron"), ("mixtral", "slurm", "deepspeed"), ("longseq", "slurm", "torchtitan"),
])
def test_no_injection_through_names_or_paths(tmp_path, case, fmt, framework):
    files = render(fmt, _nasty_context(case, framework))
    for name, text in files.items():
        (tmp_path / name).write_text(text)
        if name.endswith(".py"):
            tree = ast.parse(text)
            kinds = {type(node).__name__ for node in tree.body}
            assert kinds <= {"Expr", "ImportFrom", "FunctionDef"}, kinds  # Expr: the docstring only
            assert sum(isinstance(n, ast.Expr) for n in tree.body) == 1
            values = [ast.literal_eval(node.value) for node in ast.walk(tree)
                      if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)]
            assert "tok " + NASTY in values and "my data/" + NASTY in values
    script = main_script(files)
    calls = run_script(tmp_path / script, tmp_path)
    assert not list(tmp_path.glob("PWNED*")), "a value ran as a command"
    argv = [arg for call in calls for arg in call["argv"]]
    runs = framework if fmt == "slurm" else fmt
    if runs == "megatron":
        assert "my data/" + NASTY in argv and "tok " + NASTY in argv  # one argument each, intact
    elif runs == "deepspeed":
        assert calls[-1]["env"]["DATA_PATH"] == "my data/" + NASTY and calls[-1]["env"]["TOKENIZER"] == "tok " + NASTY
    for line in (tmp_path / script).read_text().splitlines():
        if "SBATCH --job-name" in line:
            assert re.fullmatch(r"#SBATCH --job-name=[A-Za-z0-9._-]+", line)


def main_script(files) -> str:
    """The script a person runs: the sbatch file if there is one, else the framework's launch script."""
    return next((n for n in files if n.endswith(".sbatch")), None) or next(n for n in files if n.endswith(".sh"))


def test_comment_cannot_end_early():
    from autotune.outputs.emit.shell import comment_lines

    assert comment_lines(["a\nrm -rf x\r\u2028y"]) == ["# a?rm -rf x??y"]


# --- the scripts run: argv reaches torchrun / srun / deepspeed as written ---------------------

@pytest.mark.parametrize("case, fmt", [(c, f) for c in sorted(CASES) for f in FORMATS
                                        if "REFUSED.txt" not in _outputs(c, f)])
def test_scripts_run_with_stub_launchers(tmp_path, case, fmt):
    files = _outputs(case, fmt)
    for name, text in files.items():
        (tmp_path / name).write_text(text)
    calls = run_script(tmp_path / main_script(files), tmp_path)
    context = context_for(case, framework=SLURM_FRAMEWORK[case] if fmt == "slurm" else "megatron")
    launcher = calls[-1]
    if fmt == "deepspeed":
        assert launcher["prog"] == "deepspeed"
        argv = launcher["argv"]
        assert int(argv[argv.index("--num_nodes") + 1]) * int(argv[argv.index("--num_gpus") + 1]) == context.n_gpus
        assert argv[argv.index("--deepspeed_config") + 1] == str(tmp_path / "ds_config.json")
        return
    if fmt == "slurm":
        assert launcher["prog"] == "srun" and "torchrun" in launcher["argv"]
        argv = launcher["argv"][launcher["argv"].index("torchrun") + 1:]
        assert launcher["env"]["MASTER_ADDR"] == "node-a"
        assert launcher["env"]["MASTER_PORT"].isdigit()
    else:
        assert launcher["prog"] == "torchrun"
        argv = launcher["argv"]
    nnodes = int(argv[argv.index("--nnodes") + 1])
    nproc = int(argv[argv.index("--nproc-per-node") + 1])
    assert nnodes * nproc == context.n_gpus
    assert argv[argv.index("--rdzv-backend") + 1] == "c10d"


# --- the CLI -----------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def cli_app():
    from autotune.cli import app

    return app


def invoke(app, *args):
    from typer.testing import CliRunner

    return CliRunner().invoke(app, [str(a) for a in args])


SEARCH = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "8192", "-b", "64"]


@pytest.fixture(scope="module")
def searched(tmp_path_factory, cli_app):
    out = tmp_path_factory.mktemp("search")
    result = invoke(cli_app, "search", *SEARCH, "--top", "3", "--out", out, "--force")
    assert result.exit_code == 0, result.output
    return out


def test_cli_emits_from_plans_json(cli_app, searched, tmp_path):
    document = json.loads((searched / "plans.json").read_text())
    result = invoke(cli_app, "emit", searched / "plans.json", "--rank", 2, "--format", "megatron", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    text = (tmp_path / "megatron_pretrain_gpt.sh").read_text()
    plan = document["plans"][1]["plan"]
    assert f"plan: {parse_plan(','.join(f'{k}={v}' for k, v in plan.items() if k != 'dp'), 16).as_string()}" in text
    assert f"--tensor-model-parallel-size {plan['tp']}" in text
    assert os.access(tmp_path / "megatron_pretrain_gpt.sh", os.X_OK)
    step = document["plans"][1]["estimate"]["step_time_s"]
    assert f"step {step:.3f} s" in text


def test_cli_accepts_the_search_folder_and_prints_without_out(cli_app, searched):
    result = invoke(cli_app, "emit", searched, "--format", "slurm")
    assert result.exit_code == 0, result.output
    assert "# ===== launch.sbatch =====" in result.output and "# ===== megatron_pretrain_gpt.sh =====" in result.output


def test_cli_json_output(cli_app, searched):
    result = invoke(cli_app, "emit", searched, "--format", "megatron", "--json")
    assert result.exit_code == 0, result.output
    document = json.loads(result.output)
    assert document["format"] == "megatron" and "megatron_pretrain_gpt.sh" in document["files"]


def test_cli_does_not_overwrite_without_force(cli_app, searched, tmp_path):
    assert invoke(cli_app, "emit", searched, "--out", tmp_path).exit_code == 0
    (tmp_path / "megatron_pretrain_gpt.sh").write_text("mine\n")
    result = invoke(cli_app, "emit", searched, "--out", tmp_path)
    assert result.exit_code == 2 and "--force" in result.output
    assert (tmp_path / "megatron_pretrain_gpt.sh").read_text() == "mine\n"
    assert invoke(cli_app, "emit", searched, "--out", tmp_path, "--force").exit_code == 0
    assert (tmp_path / "megatron_pretrain_gpt.sh").read_text() != "mine\n"


def test_cli_emits_a_plan_string_with_predict_flags(cli_app, tmp_path):
    result = invoke(cli_app, "emit", "tp=4,cp=16,zero=3", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", 128,
                    "-s", 131072, "-b", 32, "--format", "torchtitan", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    module = (tmp_path / "autotune_torchtitan.py").read_text()
    assert "config.parallelism.context_parallel_degree = 16" in module and "predicted: step" in module


@pytest.mark.parametrize("args, needle", [
    (["tp=2"], "--model"),
    (["tp=2", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "8", "--format", "x"],
     "unknown format"),
    (["tp=3", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "8"], "--plan"),
    (["tp=2,cp=2", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "8",
      "--format", "deepspeed"], "cp=2"),
    ([], "PLAN"),
])
def test_cli_errors_are_one_line_with_the_field(cli_app, args, needle):
    result = invoke(cli_app, "emit", *args)
    assert result.exit_code == 2
    assert needle in result.output and "Traceback" not in result.output


def test_cli_rank_out_of_range(cli_app, searched):
    result = invoke(cli_app, "emit", searched, "--rank", 9)
    assert result.exit_code == 2 and "--rank" in result.output and "ranks 1, 2, 3" in result.output


def test_cli_plans_json_inputs_cannot_be_overridden(cli_app, searched):
    result = invoke(cli_app, "emit", searched, "--seq-len", 4096)
    assert result.exit_code == 2 and "--seq-len" in result.output


# --- the search hooks -----------------------------------------------------------------------

def test_parse_formats_pairs_slurm_with_a_framework():
    from autotune.outputs.emit.formats import parse_formats

    assert parse_formats("megatron,slurm") == ["megatron", "slurm:megatron"]
    assert parse_formats("torchtitan,slurm") == ["torchtitan", "slurm:torchtitan"]
    assert parse_formats("slurm") == ["slurm:megatron"]
    assert parse_formats("slurm:deepspeed") == ["slurm:deepspeed"]
    with pytest.raises(InputError, match="--emit"):
        parse_formats("megatron,nope")


def test_search_winner_renders_and_writes_its_configs(tmp_path):
    from autotune.outputs.emit.formats import render_formats, search_context
    from autotune.outputs.files import write_files

    context = context_for("mixtral")
    cluster = Cluster(load_hardware(context.hardware), context.n_gpus, context.gpus_per_node)
    workload = TrainWorkload(seq_len=context.seq_len, global_batch=context.global_batch)
    files = render_formats(["deepspeed", "slurm"], search_context(context.plan, context.model, cluster, workload,
                                                                  context.estimate))
    written = write_files(tmp_path, files, False)
    assert sorted(p.name for p in written) == ["deepspeed_launch.sh", "ds_config.json", "launch.sbatch"]
    assert "DEEPSPEED_ARGS" in (tmp_path / "launch.sbatch").read_text()
    with pytest.raises(InputError, match="would overwrite"):
        write_files(tmp_path, files, False)


def test_check_formats_refuses_a_model_no_plan_of_which_fits_the_format():
    from autotune.outputs.emit.formats import check_formats

    check_formats(["megatron", "slurm", "deepspeed"], load_model("gpt3-175b"))
    with pytest.raises(InputError, match=r"field '--emit': torchtitan cannot express any plan here: model gpt3-175b"):
        check_formats(["megatron", "torchtitan"], load_model("gpt3-175b"))
    with pytest.raises(InputError, match="slurm:torchtitan .*seq_len=262144"):
        check_formats(["slurm:torchtitan"], load_model("llama3-8b"), TrainWorkload(seq_len=262144, global_batch=8))


def test_expressible_mask_restricts_a_batch():
    from autotune.outputs.emit.formats import expressible_mask

    model = load_model("llama3-70b")
    plans = PlanBatch.from_plans([parse_plan(text, 128) for text in
                                  ("tp=4,cp=16,zero=3", "tp=1,pp=4,zero=1", "tp=8,sp=true,zero=1,precision=fp8")])
    assert expressible_mask("deepspeed", plans, model).tolist() == [False, True, False]
    assert expressible_mask("megatron", plans, model).tolist() == [True, True, True]
    assert expressible_mask("slurm:deepspeed", plans, model).tolist() == [False, True, False]
    assert expressible_mask("torchtitan", plans, load_model("gpt3-175b")).tolist() == [False, False, False]
    assert expressible_mask("torchtitan", plans, model).tolist() == [True, True, True]
    too_long = TrainWorkload(seq_len=262144, global_batch=32)
    assert expressible_mask("torchtitan", plans, model, too_long).tolist() == [False, False, False]
    assert expressible_mask("megatron", plans, model, too_long).tolist() == [True, True, True]


def _search_has_emit(app) -> bool:
    import inspect

    for command in app.registered_commands:
        if (command.name or command.callback.__name__) == "search":
            return "emit" in inspect.signature(command.callback).parameters
    return False


def test_search_emit_writes_configs_for_an_expressible_winner(cli_app, tmp_path):
    assert _search_has_emit(cli_app)
    result = invoke(cli_app, "search", *SEARCH, "--top", "3", "--emit", "deepspeed,slurm", "--out", tmp_path)
    assert result.exit_code == 0, result.output
    document = json.loads((tmp_path / "plans.json").read_text())
    model = load_model("llama3-8b")
    for entry in document["plans"]:
        plan = parse_plan(",".join(f"{k}={v}" for k, v in entry["plan"].items() if k != "dp"), 16)
        assert FRAMEWORKS["deepspeed"].can_express(plan, model) == []
    assert {"ds_config.json", "deepspeed_launch.sh", "launch.sbatch"} <= {p.name for p in tmp_path.iterdir()}
    refused = invoke(cli_app, "search", "-m", "gpt3-175b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "2048",
                     "-b", "512", "--emit", "torchtitan", "--out", tmp_path / "gpt3")
    assert refused.exit_code == 2 and "--emit" in refused.output and "gpt3-175b" in refused.output


def _predicted_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("# predicted:"))


def test_a_plans_json_of_another_framework_quotes_the_estimate_of_the_one_the_files_run(cli_app, searched, tmp_path):
    """A Megatron-Bridge search emitted as a Megatron-LM script quotes Megatron-LM's estimate, the one a plan
    string with --format megatron gets, and says so; a plan the files' framework does not offer is refused."""
    document = json.loads((searched / "plans.json").read_text())
    document["inputs"]["framework"] = "megatron-bridge"
    bridge = tmp_path / "bridge.json"
    bridge.write_text(json.dumps(document))
    from_file = invoke(cli_app, "emit", bridge, "--format", "megatron")
    assert from_file.exit_code == 0, from_file.output
    assert "was searched for megatron-bridge" in from_file.output and "megatron-lm's" in from_file.output
    plan = document["plans"][0]["plan"]
    text = ",".join(f"{k}={v}" for k, v in plan.items() if k != "dp")
    from_string = invoke(cli_app, "emit", text, "--format", "megatron", *SEARCH)
    assert from_string.exit_code == 0, from_string.output
    assert _predicted_line(from_file.output) == _predicted_line(from_string.output)
    # the file's own framework keeps its estimate and prints no note
    own = invoke(cli_app, "emit", searched / "plans.json", "--format", "megatron")
    assert own.exit_code == 0 and "was searched for" not in own.output
    # a plan the framework the files run does not offer: refused, with the way out
    plan.update(zero=3, pp=2)
    plan.pop("dp", None)
    bridge.write_text(json.dumps(document))
    refused = invoke(cli_app, "emit", bridge, "--format", "megatron")
    assert refused.exit_code == 2 and "cannot run on megatron-lm" in refused.output
    assert "--framework megatron-lm" in refused.output and "Traceback" not in refused.output


def test_a_plans_json_keeps_its_framework_and_version_when_its_files_run_it(cli_app, searched, tmp_path):
    """A versioned Megatron-LM search keeps its version with or without --framework megatron-lm; another version
    named is estimated for that one, with a note; a Megatron-DeepSpeed search emitted as DeepSpeed files runs
    Megatron-DeepSpeed and keeps its estimate."""
    document = json.loads((searched / "plans.json").read_text())
    # the best plan at ZeRO-1, which megatron-lm@2023-06 offers (its ZeRO-3 came in 2024-10): an edited file's plan
    # is held to the rules of the framework it names
    document["plans"][0]["plan"]["zero"] = 1

    def emit(framework_spec: str, *flags: str):
        path = tmp_path / f"{framework_spec.replace('@', '_')}.json"
        path.write_text(json.dumps({**document, "inputs": {**document["inputs"], "framework": framework_spec}}))
        # the edited plan need not fit the older version's memory: the files are what this checks
        result = invoke(cli_app, "emit", path, *flags, "--allow-no-fit")
        assert result.exit_code == 0, result.output
        return result.output

    old = emit("megatron-lm@2023-06", "--format", "megatron")
    assert "was searched for" not in old
    assert _predicted_line(emit("megatron-lm@2023-06", "--format", "megatron", "--framework", "megatron-lm")) == \
        _predicted_line(old)
    newer = emit("megatron-lm@2023-06", "--format", "megatron", "--framework", "megatron-lm@2025-09")
    assert "was searched for megatron-lm@2023-06; the files run megatron-lm@2025-09" in newer
    assert _predicted_line(newer) != _predicted_line(old)
    mds = emit("megatron-deepspeed", "--format", "deepspeed")
    assert "was searched for" not in mds
    plain = emit("megatron-deepspeed", "--format", "deepspeed", "--framework", "deepspeed")
    assert "the files run deepspeed" in plain


@pytest.mark.parametrize("fmt", ["megatron", "deepspeed"])
def test_a_plans_json_naming_an_unknown_framework_version_is_refused_by_its_key(cli_app, searched, tmp_path, fmt):
    document = json.loads((searched / "plans.json").read_text())
    document["inputs"]["framework"] = "megatron-lm@core_r0.12"
    path = tmp_path / "core.json"
    path.write_text(json.dumps(document))
    result = invoke(cli_app, "emit", path, "--format", fmt)
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert "core.json: field 'inputs.framework'" in result.output and "rerun the search" in result.output


def _megatron_argv(model_name: str, plan_text: str, gpus: int = 64) -> list[str]:
    from autotune.training.plan import parse_plan

    model = load_model(model_name)
    plan = parse_plan(plan_text, gpus)
    context = EmitContext(plan=plan, model=model, hardware="h100-sxm5-80gb", gpus_per_node=8, seq_len=4096,
                          global_batch=1024)
    return [str(a) for a in megatron.launch(context).argv()[1:]]


@pytest.mark.parametrize("name, plan, wanted, absent", [
    # Llama 3.1: base 500000 and its frequency scaling (Megatron's defaults: 10000, none)
    ("llama3.1-70b", "tp=8,zero=1", {"--rotary-base": "500000", "--use-rope-scaling": None}, ("--qk-layernorm",)),
    ("llama3-70b", "tp=8,zero=1", {"--rotary-base": "500000"}, ("--use-rope-scaling",)),
    ("qwen3-32b", "tp=8,zero=1", {"--rotary-base": "1000000", "--qk-layernorm": None}, ()),
    # DeepSeek-V3: sigmoid scores, bias balancing with a small sequence-wise loss, top-k weights scaled by 2.5
    ("deepseek-v3", "tp=8,pp=4,ep=8,zero=1", {"--rotary-base": "10000", "--moe-router-score-function": "sigmoid",
                                              "--moe-router-enable-expert-bias": None,
                                              "--moe-router-load-balancing-type": "seq_aux_loss",
                                              "--moe-aux-loss-coeff": "1e-4",
                                              "--moe-router-topk-scaling-factor": "2.5"}, ()),
    ("mixtral-8x7b", "tp=2,ep=8,zero=1", {"--moe-router-load-balancing-type": "aux_loss", "--rotary-base": "1000000"},
     ("--moe-router-enable-expert-bias", "--moe-router-score-function")),
])
def test_megatron_builds_the_model_the_spec_names(name, plan, wanted, absent):
    """The launch file trained another model: Megatron's rotary base 10000 for Llama 3's 500000, no QK norm for Qwen3,
    a softmax router with a 0.01 auxiliary loss for DeepSeek-V3's sigmoid and bias balancing."""
    argv = _megatron_argv(name, plan, 256 if name == "deepseek-v3" else 64)
    for flag, value in wanted.items():
        assert flag in argv, flag
        if value is not None:
            assert argv[argv.index(flag) + 1] == value, (flag, argv[argv.index(flag) + 1])
    for flag in absent:
        assert flag not in argv, flag


def test_a_spec_without_its_rope_base_says_so_in_the_launch_file():
    import dataclasses

    model = dataclasses.replace(load_model("llama3-70b"), rope_theta=None)
    from autotune.training.plan import parse_plan

    context = EmitContext(plan=parse_plan("tp=8,zero=1", 64), model=model, hardware="h100-sxm5-80gb",
                          gpus_per_node=8, seq_len=4096, global_batch=1024)
    launch = megatron.launch(context)
    assert "--rotary-base" not in [str(a) for a in launch.argv()]
    assert any("states no rope_theta" in note for note in launch.notes)


def test_hugging_face_configs_bring_what_the_launch_files_need():
    from autotune.inputs.hf_config import spec_mapping_from_hf

    deepseek = spec_mapping_from_hf({"model_type": "deepseek_v3", "num_hidden_layers": 4, "hidden_size": 1024,
                                     "intermediate_size": 2048, "num_attention_heads": 8, "vocab_size": 1000,
                                     "kv_lora_rank": 64, "qk_nope_head_dim": 32, "qk_rope_head_dim": 16,
                                     "v_head_dim": 32, "q_lora_rank": 128, "n_routed_experts": 16,
                                     "num_experts_per_tok": 4, "moe_intermediate_size": 256, "n_shared_experts": 1,
                                     "first_k_dense_replace": 1, "moe_layer_freq": 1, "n_group": 4, "topk_group": 2,
                                     "scoring_func": "sigmoid", "topk_method": "noaux_tc",
                                     "routed_scaling_factor": 2.5, "rope_theta": 10000,
                                     "rope_scaling": {"type": "yarn", "factor": 40}}, source="cfg.json")
    assert deepseek["rope_theta"] == 10000.0 and deepseek["rope_scaling"] == "yarn"
    assert {k: deepseek["moe"][k] for k in ("router_score", "router_expert_bias", "router_topk_scaling")} == {
        "router_score": "sigmoid", "router_expert_bias": True, "router_topk_scaling": 2.5}
    with pytest.raises(InputError, match="rope_theta"):
        spec_mapping_from_hf({"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024,
                              "intermediate_size": 2048, "num_attention_heads": 8, "vocab_size": 1000,
                              "rope_theta": float("nan")}, source="cfg.json")


def test_expert_bias_balancing_needs_sigmoid_scores():
    """Megatron-Core refuses an expert bias on softmax scores; a spec (or config.json) asking for it is refused, and
    a config with noaux_tc but no sigmoid scoring keeps the plain router."""
    from autotune.inputs.hf_config import spec_mapping_from_hf
    from autotune.inputs.modelspec import model_from_mapping, model_to_mapping

    data = model_to_mapping(load_model("mixtral-8x7b"))
    data["moe"]["router_expert_bias"] = True
    with pytest.raises(InputError, match="router_expert_bias needs router_score sigmoid"):
        model_from_mapping(data, source="spec.yaml")
    config = {"model_type": "qwen3_moe", "num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 2048,
              "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000, "num_experts": 16,
              "num_experts_per_tok": 4, "moe_intermediate_size": 256, "topk_method": "noaux_tc"}
    assert "router_expert_bias" not in spec_mapping_from_hf(config, source="cfg.json")["moe"]


def test_minimax_per_layer_qk_norm_is_not_megatrons_per_head_one():
    from autotune.inputs.hf_config import spec_mapping_from_hf

    base = {"model_type": "llama", "num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 2048,
            "num_attention_heads": 8, "vocab_size": 1000, "use_qk_norm": True}
    assert spec_mapping_from_hf({**base, "qk_norm_type": "per_layer"}, source="c.json").get("qk_layernorm") is None
    assert spec_mapping_from_hf(base, source="c.json")["qk_layernorm"] is True
    assert "--qk-layernorm" not in _megatron_argv("minimax-m2.5", "tp=4,pp=2,ep=8,zero=1", 256)
    assert "--moe-router-enable-expert-bias" in _megatron_argv("minimax-m2.5", "tp=4,pp=2,ep=8,zero=1", 256)
    # MiniMax-M2's per-layer norm is said, and its RoPE on 64 of 128 dims set (it had rotated every dim)
    argv = _megatron_argv("minimax-m2.5", "tp=4,pp=2,ep=8,zero=1", 256)
    assert argv[argv.index("--rotary-percent") + 1] == "0.5"
    assert any("qk_norm_type per_layer" in n for n in megatron.model_notes(load_model("minimax-m2.5")))
    assert spec_mapping_from_hf({**base, "qk_norm_type": "per_layer"}, source="c.json")["qk_norm_per_layer"] is True
    assert spec_mapping_from_hf({**base, "partial_rotary_factor": 0.25}, source="c.json")["rotary_percent"] == 0.25
    assert "rotary_percent" not in spec_mapping_from_hf({**base, "rotary_dim": 32}, source="c.json")  # MiniMax-M2 only
    assert "rotary_percent" not in spec_mapping_from_hf({**base, "partial_rotary_factor": 1.0}, source="c.json")
    assert "--rotary-percent" not in _megatron_argv("llama3-8b", "tp=2,zero=1", 64)


def test_rope_flags_follow_the_position_embedding_and_say_what_they_leave():
    import dataclasses

    from autotune.training.plan import parse_plan

    def launch_of(model):
        return megatron.launch(EmitContext(plan=parse_plan("tp=8,zero=1", 64), model=model, hardware="h100-sxm5-80gb",
                                           gpus_per_node=8, seq_len=4096, global_batch=1024))

    llama31 = load_model("llama3.1-70b")
    # (a spec keeping rope_theta or rope_scaling with a learned embedding is refused when read; the emitter still
    # writes no rotary flag for a learned one)
    learned = launch_of(dataclasses.replace(llama31, position_embedding="learned", rope_theta=None, rope_scaling=None))
    assert "--use-rope-scaling" not in [str(a) for a in learned.argv()] and "--rotary-base" not in [
        str(a) for a in learned.argv()]
    assert any("factor 8" in n for n in launch_of(llama31).notes)
    fractional = launch_of(dataclasses.replace(llama31, rope_theta=500000.5))
    argv = [str(a) for a in fractional.argv()]
    assert argv[argv.index("--rotary-base") + 1] == "500000" and any("integer" in n for n in fractional.notes)
    gpt_oss = megatron.model_notes(load_model("gpt-oss-120b"))
    assert any("--position-embedding-type yarn" in n for n in gpt_oss)
    assert any("multi-latent attention uses yarn" in n for n in megatron.model_notes(load_model("deepseek-v3")))


@pytest.mark.parametrize("layers, pp, vp", [(30, 2, 2), (31, 2, 3), (80, 32, 1), (62, 32, 2)])
def test_megatron_pipeline_edge_cases_give_every_layer_once_and_the_priced_peak(layers, pp, vp):
    """pp 2 with virtual stages, and more ranks than ceil(L/pp) fills (80 layers over 32: the last rank would hold
    less than nothing as the cost model counts, so ceil and floor), each layer on exactly one stage."""
    import dataclasses

    from autotune.outputs.emit.megatron import pipeline_counts, pipeline_layout

    model = dataclasses.replace(load_model("llama3-8b"), n_layers=layers)
    counts = pipeline_counts(layers, pp)
    assert sum(counts) == layers and max(counts) == -(-layers // pp) and min(counts) >= 0
    split = pipeline_split(layers, pp, vp)
    layout = pipeline_layout(model, pp, vp)
    assert (split is False) or (split is not None) or (layout is not None)
    if layout is not None:
        assert layout.count("t") == layers and len(layout.split("|")) == pp * vp


def test_attention_biases_reach_the_megatron_file():
    """Qwen2's q/k/v biases were dropped (--disable-bias-linear and nothing else), training another network than the
    checkpoint's; gpt-oss's attention_bias (q/k/v/o) gets the q/k/v part and a note for the output projection's."""
    from autotune.inputs.hf_config import spec_mapping_from_hf
    from autotune.inputs.modelspec import model_from_mapping

    base = {"num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 2048, "num_attention_heads": 8,
            "num_key_value_heads": 4, "vocab_size": 1000}
    qwen2 = model_from_mapping(spec_mapping_from_hf({"model_type": "qwen2", **base}, source="c.json"), source="c.json")
    llama = model_from_mapping(spec_mapping_from_hf({"model_type": "llama", **base}, source="c.json"), source="c.json")
    biased = model_from_mapping(spec_mapping_from_hf({"model_type": "llama", "attention_bias": True, **base},
                                                     source="c.json"), source="c.json")
    assert (qwen2.attention_bias, llama.attention_bias, biased.attention_bias) == ("qkv", "none", "all")
    assert ("--add-qkv-bias",) in megatron.model_args(qwen2, 4096)
    assert ("--add-qkv-bias",) not in megatron.model_args(llama, 4096)
    assert not any("output projection has a bias" in n for n in megatron.model_notes(qwen2))
    gpt_oss = load_model("gpt-oss-120b")
    assert gpt_oss.attention_bias == "all" and ("--add-qkv-bias",) in megatron.model_args(gpt_oss, 4096)
    assert any("output projection has a bias too" in n for n in megatron.model_notes(gpt_oss))
