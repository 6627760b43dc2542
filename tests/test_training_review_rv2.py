"""Regression tests for training defects found reviewing the framework rules, the fp16 gradient model and explain."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app as cli_app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def invoke(*args):
    return runner.invoke(cli_app, [str(a) for a in args])


MIXTRAL16 = ("--model", "mixtral-8x7b", "--hardware", "h100-sxm5-80gb", "--gpus", 16, "--seq-len", 4096,
             "--global-batch", 64)
MOE_TP_NO_SP = "tp=2,sp=false,ep=4,recompute=full"


@pytest.mark.parametrize("framework", ["megatron-lm", "nemo", "megatron-bridge"])
def test_megatron_core_frameworks_refuse_moe_with_tp_but_no_sp(framework):
    # Megatron-Core's MoELayer.forward raises ValueError at the first training step when the attention TP group has
    # more than one rank and sequence_parallel is off: predict must not call such a plan runnable
    out = invoke("predict", *MIXTRAL16, "--plan", MOE_TP_NO_SP, "--framework", framework)
    assert out.exit_code == 1, out.output
    assert "invalid plan" in out.output and "no sequence parallelism" in out.output
    assert "(tp=2, sp=false)" in out.output and "use sp=true, or tp=1" in out.output
    # the same plan with sequence parallelism runs
    ok = invoke("predict", *MIXTRAL16, "--plan", MOE_TP_NO_SP.replace("sp=false", "sp=true"), "--framework", framework)
    assert ok.exit_code == 0, ok.output


def test_moe_tp_without_sp_stays_valid_elsewhere():
    # torchtitan's MoE has no such check (its experts are never tensor-parallel: etp=1); Megatron-LM before its
    # Megatron-Core MoE (2023-10) is not held to it either, nor is a dense model under Megatron-LM
    titan = invoke("predict", *MIXTRAL16, "--plan", MOE_TP_NO_SP + ",zero=2,etp=1", "--framework", "torchtitan")
    assert titan.exit_code == 0, titan.output
    dense = invoke("predict", "--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", 16, "--seq-len", 4096,
                   "--global-batch", 64, "--plan", "tp=2,sp=false,recompute=full")
    assert dense.exit_code == 0, dense.output


def test_search_without_sp_with_tp_rule_keeps_no_moe_plan_megatron_core_refuses(tmp_path):
    space = (ROOT / "search_spaces" / "train.yaml").read_text()
    assert "sp_with_tp: true" in space
    path = tmp_path / "nosp.yaml"
    path.write_text(space.replace("sp_with_tp: true", "sp_with_tp: false"))
    out = invoke("search", *MIXTRAL16, "--space", path, "--json", "--top", 300)
    assert out.exit_code == 0, out.output
    plans = [row["plan"] for row in json.loads(out.stdout)["plans"]]
    assert plans and not [p for p in plans if p["tp"] > 1 and not p["sp"]]
    assert [p for p in plans if p["tp"] > 1]  # tensor-parallel plans remain, with sp
    # pinned to tp=2, sp=false, nothing is left and the rule says why
    pinned = invoke("search", *MIXTRAL16, "--space", path, "--fix", "sp=false", "--fix", "tp=2")
    assert "mixture of experts with tp > 1 but no sequence parallelism" in pinned.output, pinned.output
    assert "allow sp=true" in pinned.output


# --- fp16 gradients under Megatron -----------------------------------------------------------------------------------

def _estimate(framework: str, plan: str, precision: str, n_gpus: int = 16):
    from autotune.inputs.framework import load_framework
    from autotune.inputs.hardware import Cluster, load_hardware
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import TrainWorkload
    from autotune.training.estimate import estimate_training
    from autotune.training.plan import PlanBatch, parse_plan

    cluster = Cluster(load_hardware("h100-sxm5-80gb"), n_gpus, 8)
    batch = PlanBatch.from_plans([parse_plan(f"{plan},precision={precision}", n_gpus)])
    return estimate_training(load_model("llama3-8b"), cluster, TrainWorkload(4096, 64), batch,
                             load_framework(framework)).row(0)


def test_megatron_fp16_keeps_two_byte_gradients():
    # arguments.py turns accumulate_allreduce_grads_in_fp32 on for --bf16 only: an fp16 run's grad buffer is fp16.
    # With the activations larger than the step's fp32 copy of the optimizer shard's gradients (4 of the optimizer's
    # 12 bytes per parameter), the peak is the backward's and holds half bf16's gradients.
    bf16 = _estimate("megatron-lm", "tp=2,zero=1,mbs=1", "bf16")["memory_breakdown_gib"]
    fp16 = _estimate("megatron-lm", "tp=2,zero=1,mbs=1", "fp16")["memory_breakdown_gib"]
    assert bf16["activations"] > bf16["optimizer"] / 3.0  # the backward's peak is the larger one
    assert fp16["gradients"] == pytest.approx(bf16["gradients"] / 2.0, rel=1e-12)
    for part in ("weights", "optimizer", "activations", "logits"):
        assert fp16[part] == pytest.approx(bf16[part], rel=1e-12)


def test_megatron_fp16_step_peak_holds_the_fp32_gradient_copy():
    # ZeRO-0 with full recompute: few activations, so the optimizer step's peak binds, where _copy_model_grads_to_main_grads
    # has upcast every gradient (4 bytes per parameter) beside the fp16 buffer (2): the gradients part is
    # 2P + 4P - (activations + logits), P the local parameters; bf16's fp32 buffer (4P) needs no copy.
    bf16 = _estimate("megatron-lm", "tp=2,zero=0,recompute=full,mbs=1", "bf16")["memory_breakdown_gib"]
    fp16 = _estimate("megatron-lm", "tp=2,zero=0,recompute=full,mbs=1", "fp16")["memory_breakdown_gib"]
    four_p = bf16["gradients"]
    expected = four_p / 2.0 + four_p - (fp16["activations"] + fp16["logits"])
    assert four_p > fp16["activations"] + fp16["logits"]
    assert fp16["gradients"] == pytest.approx(expected, rel=1e-9)


def test_fp16_gradients_stay_as_the_framework_keeps_them_elsewhere():
    # torchtitan's FSDP2 keeps fp32 gradients (reduce_dtype float32) whatever the compute dtype
    for plan in ("tp=2,zero=3,mbs=1", "tp=2,zero=2,mbs=1"):
        bf16 = _estimate("torchtitan", plan, "bf16")
        fp16 = _estimate("torchtitan", plan, "fp16")
        assert fp16["memory_gib_per_gpu"] == pytest.approx(bf16["memory_gib_per_gpu"], rel=1e-12)
        assert fp16["step_time_s"] == pytest.approx(bf16["step_time_s"], rel=1e-12)


def test_megatron_fp16_reduces_gradients_in_fp16():
    # Megatron-LM of 2021 (SC21): no overlap of the gradient all-reduce, so it shows whole in dp_comm; fp16 moves half
    # the bytes (the ring's latency terms keep the time above exactly half)
    bf16 = _estimate("megatron-lm@2021-04", "tp=1,zero=0,recompute=full,mbs=1", "bf16", n_gpus=16)
    fp16 = _estimate("megatron-lm@2021-04", "tp=1,zero=0,recompute=full,mbs=1", "fp16", n_gpus=16)
    ratio = fp16["time_breakdown_s"]["dp_comm"] / bf16["time_breakdown_s"]["dp_comm"]
    assert 0.5 <= ratio < 0.6, ratio
    assert fp16["step_time_s"] < bf16["step_time_s"]


def test_validation_predicts_an_fp16_row_in_fp16():
    # the SC21 rows trained in fp16; predicting them as bf16 hid their fp16 gradients
    out = invoke("validate", "--bundled", "training", "--json")
    assert out.exit_code == 0, out.output
    rows = {r["id"]: r for r in json.loads(out.stdout)["rows"]}
    assert rows["NAR21-T1-01"]["plan"]["precision"] == "fp16"


# --- explain: cp and ep neighbours -----------------------------------------------------------------------------------

def _sensitivity(*args):
    out = invoke("explain", *args, "--json")
    assert out.exit_code == 0, out.output
    return {n["change"]: n for n in json.loads(out.stdout)["sensitivity"]}


def test_explain_steps_along_cp_for_a_long_context_plan():
    rows = _sensitivity("--model", "llama3-70b", "--hardware", "h100-sxm5-80gb", "--gpus", 64, "--seq-len", 131072,
                        "--global-batch", 64, "--plan", "tp=8,cp=8,zero=1,mbs=1,recompute=full")
    half = rows["cp 8 -> 4 (dp 1 -> 2)"]
    assert half["axis"] == "cp" and half["plan"]["cp"] == 4 and half["plan"]["dp"] == 2
    assert half["step_time_s"] > 0 and half["reason"] == ""
    # tp*pp*cp = 128 does not divide 64 GPUs: shown, with the rule, as the tp and pp steps are
    double = rows["cp 8 -> 16 (dp not whole)"]
    assert double["plan"] is None and "tp*pp*cp must divide the GPU count" in double["reason"]
    assert not [n for n in rows.values() if n["axis"] == "ep"]  # a dense model has no experts to spread


def test_explain_steps_along_ep_for_a_mixture_of_experts():
    rows = _sensitivity("--model", "mixtral-8x7b", "--hardware", "h100-sxm5-80gb", "--gpus", 16, "--seq-len", 4096,
                        "--global-batch", 64, "--plan", "tp=2,sp=true,ep=8,etp=1,zero=1,mbs=1,recompute=full")
    half = rows["ep 8 -> 4 (expert dp 2 -> 4)"]
    assert half["plan"]["ep"] == 4 and half["plan"]["dp"] == 8 and half["step_time_s"] > 0
    # 8 experts cannot spread over 16 ranks: the neighbour carries the rule
    double = rows["ep 8 -> 16 (expert dp 2 -> 1)"]
    assert double["reason"] == "experts not divisible by ep" and not double["fits"]
    assert "cp 1 -> 2 (dp 8 -> 4)" in rows
    qwen = _sensitivity("--model", "qwen3-30b-a3b", "--hardware", "h100-sxm5-80gb", "--gpus", 16, "--seq-len", 4096,
                        "--global-batch", 256, "--plan", "tp=1,ep=8,zero=1,mbs=1,recompute=selective")
    wider = qwen["ep 8 -> 16 (expert dp 2 -> 1)"]
    assert wider["reason"] == "" and wider["plan"]["ep"] == 16 and wider["step_time_s"] > 0
