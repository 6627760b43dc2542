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


def _precision_args(output: str) -> list[str]:
    block = output.split("PRECISION_ARGS=(", 1)[1].split(")", 1)[0]
    return block.split()


def test_megatron_fp8_with_optimizer_offload_runs_delayed_scaling():
    # validate_args: "When `--fp8-param-gather` is enabled, the optimizer cpu offload must be used in conjunction
    # with `--fp8-recipe delayed`"; the distributed optimizer's fp8 plans pass --fp8-param-gather (as the estimate
    # counts), so an offload plan on a GPU that would take MXFP8 (B200) or a MoE's blockwise recipe (H100) runs
    # delayed scaling, and says so.
    dense = ("tp=4,pp=2,zero=1,mbs=1,recompute=full,precision=fp8", "-m", "llama3.1-70b", "-H", "b200-sxm-180gb",
             "--gpus", 64, "-s", 8192, "-b", 256, "--format", "megatron")
    moe = ("tp=2,pp=4,ep=8,etp=1,zero=1,mbs=1,recompute=full,precision=fp8", "-m", "qwen3-30b-a3b", "-H",
           "h100-sxm5-80gb", "--gpus", 64, "-s", 4096, "-b", 256, "--format", "megatron")
    for args, recipe in ((dense, "mxfp8"), (moe, "blockwise")):
        plain = invoke("emit", *args)
        assert plain.exit_code == 0, plain.output
        assert _precision_args(plain.output)[-3:] == ["--fp8-recipe", recipe, "--fp8-param-gather"]
        offload = invoke("emit", args[0] + ",offload=cpu", *args[1:])
        assert offload.exit_code == 0, offload.output
        flags = _precision_args(offload.output)
        assert flags[-3:] == ["--fp8-recipe", "delayed", "--fp8-param-gather"] and "hybrid" in flags
        assert "--optimizer-cpu-offload" in offload.output
        assert f"delayed scaling rather than {recipe}" in offload.output
    # where delayed is the recipe anyway (a dense model on H100) nothing changes and no note is written
    h100 = invoke("emit", "tp=8,pp=2,zero=1,mbs=1,recompute=full,precision=fp8,offload=cpu", "-m", "llama3.1-70b",
                  "-H", "h100-sxm5-80gb", "--gpus", 64, "-s", 8192, "-b", 256, "--format", "megatron")
    assert h100.exit_code == 0, h100.output
    assert "--fp8-recipe delayed" in " ".join(_precision_args(h100.output)) and "rather than" not in h100.output


def test_emit_refusal_of_a_reestimated_plan_says_why_it_no_longer_fits(tmp_path):
    # A NeMo search keeps bf16 gradient buffers (grad_bytes 2); Megatron-LM's launch files keep fp32 ones, so the plan
    # the NeMo search found to fit is estimated again and does not. The refusal is the one line printed: it carries the
    # figures and the reason they differ from the plans.json's, which the note it replaces used to say.
    out = tmp_path / "nemo"
    searched = invoke("search", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus", 64, "-s", 8192, "-b", 256,
                      "--framework", "nemo", "--precision", "fp8", "--fix", "tp=8", "--fix", "pp=1", "--fix", "cp=1",
                      "--fix", "zero=1", "--fix", "mbs=1", "--fix", "recompute=none", "--fix", "offload=none",
                      "--out", out)
    assert searched.exit_code == 0, searched.output
    refused = invoke("emit", out, "--format", "megatron")
    assert refused.exit_code == 2, refused.output
    text = " ".join(refused.output.split())
    assert "does not fit (out of memory: " in text and "of 79.1 GiB per GPU" in text
    assert "was searched for nemo; the files run megatron-lm" in text
    written = invoke("emit", out, "--format", "megatron", "--allow-no-fit")
    assert written.exit_code == 0, written.output
    assert "of 79.1 GiB per GPU)." in " ".join(written.output.split())
    # a plan string names no other search: the figures only
    plain = invoke("emit", "tp=8,zero=1,mbs=1,precision=fp8", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus", 64,
                   "-s", 8192, "-b", 256, "--format", "megatron")
    assert plain.exit_code == 2 and "of 79.1 GiB per GPU)" in " ".join(plain.output.split()), plain.output
    assert "searched for" not in plain.output
