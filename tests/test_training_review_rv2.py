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
