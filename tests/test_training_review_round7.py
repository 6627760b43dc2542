"""Regression tests for launch-config and note defects found reviewing training plans (round 7)."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.cli import app as cli_app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(cli_app, [str(a) for a in args])


def test_deepspeed_refuses_autotp_with_zero3():
    # deepspeed.initialize asserts ZeRO stage <= 2 when tensor_parallel.autotp_size > 1: a ds_config.json
    # with both would die at engine start on every rank.
    result = invoke("emit", "tp=2,sp=false,zero=3,mbs=2", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", 64,
                    "-s", 8192, "-b", 256, "--format", "deepspeed", "--framework", "megatron-deepspeed")
    assert result.exit_code == 2, result.output
    assert "tp=2, zero=3" in result.output and "AutoTP" in result.output
    # ZeRO-2 with AutoTP is written
    ok = invoke("emit", "tp=2,sp=false,zero=2,mbs=2", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", 64,
                "-s", 8192, "-b", 256, "--format", "deepspeed", "--framework", "megatron-deepspeed", "--json")
    assert ok.exit_code == 0, ok.output


def test_deepspeed_search_winner_is_not_autotp_zero3(tmp_path):
    space = tmp_path / "space.yaml"
    from pathlib import Path
    text = (Path(__file__).resolve().parents[1] / "search_spaces" / "train.yaml").read_text()
    space.write_text(text.replace("sp_with_tp: true", "sp_with_tp: false"))
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", 32, "-s", 8192, "-b", 256,
                    "--framework", "megatron-deepspeed", "--space", space, "--emit", "deepspeed", "--out", tmp_path / "o")
    assert result.exit_code == 0, result.output
    config = json.loads((tmp_path / "o" / "ds_config.json").read_text())
    assert not ("tensor_parallel" in config and config["zero_optimization"]["stage"] == 3)


def _predict(plan: str) -> dict:
    result = invoke("predict", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus", 64, "-s", 8192, "-b", 512,
                    "--plan", plan, "--json")
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.output)["estimate"]


def test_megatron_zero2_fp8_counts_te_weight_copies():
    # The launch files pass --fp8-param-gather under the distributed optimizer (ZeRO-1) only; ZeRO-2 runs on
    # Megatron-FSDP optim_grads with bf16 parameters, so TransformerEngine's cached fp8 copies sit beside them.
    z2_fp8 = _predict("tp=8,zero=2,mbs=2,precision=fp8")["memory_breakdown_gib"]["weights"]
    z2_bf16 = _predict("tp=8,zero=2,mbs=2,precision=bf16")["memory_breakdown_gib"]["weights"]
    z1_fp8 = _predict("tp=8,zero=1,mbs=2,precision=fp8")["memory_breakdown_gib"]["weights"]
    z1_bf16 = _predict("tp=8,zero=1,mbs=2,precision=bf16")["memory_breakdown_gib"]["weights"]
    assert z2_fp8 - z2_bf16 > 15.0
    assert abs(z1_fp8 - z1_bf16) < 0.01
    files = invoke("emit", "tp=8,zero=2,mbs=2,precision=fp8,offload=cpu", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb",
                   "--gpus", 64, "-s", 8192, "-b", 512, "--format", "megatron", "--json")
    assert files.exit_code == 0, files.output
    assert "--fp8-param-gather" not in files.output
