"""Regression tests for training defects found reviewing search, predict, explain and emit as a practitioner."""

from __future__ import annotations

from typer.testing import CliRunner

from autotune.cli import app as cli_app

runner = CliRunner()


def invoke(*args):
    return runner.invoke(cli_app, [str(a) for a in args])


MIXTRAL = ("-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", 64, "-s", 4096, "-b", 512)


def test_megatron_refuses_moe_with_tensor_parallelism_but_no_sequence_parallelism():
    # Megatron-Core's MoELayer.forward raises a ValueError in training when the attention TP group has more
    # than one rank and sequence_parallel is off; validate_args does not catch it, the run dies at step one.
    plan = "tp=2,sp=false,ep=4,zero=1,mbs=1,recompute=full,precision=bf16"
    refused = invoke("emit", plan, *MIXTRAL, "--format", "megatron")
    assert refused.exit_code == 2, refused.output
    assert "tp=2, sp=false" in refused.output and "sp=true" in refused.output
    # the same plan with sequence parallelism is written, with the flag
    written = invoke("emit", plan.replace("sp=false", "sp=true"), *MIXTRAL, "--format", "megatron", "--json")
    assert written.exit_code == 0, written.output
    assert "--sequence-parallel" in written.output
    # a dense model keeps the choice (Megatron runs dense TP without SP)
    dense = invoke("emit", "tp=2,sp=false,zero=1,mbs=1,recompute=full", "-m", "llama3-8b", "-H", "h100-sxm5-80gb",
                   "--gpus", 64, "-s", 4096, "-b", 512, "--format", "megatron", "--json")
    assert dense.exit_code == 0, dense.output
