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
