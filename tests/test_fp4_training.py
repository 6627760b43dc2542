"""NVFP4 training (precision=fp4): Megatron-Core's --fp4-format e2m1 --fp4-recipe nvfp4 on Blackwell.

Hand-checked numbers for the kernel and memory terms, the rules that keep fp4 plans to GPUs with FP4 tensor cores and
frameworks that train in it, the Megatron flags, the refusals of the other formats, and the published runs.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.costmodel.kernels import FP4_CAST_BYTES, NVFP4_BYTES, Kernels
from autotune.inputs.framework import load_framework
from autotune.inputs.hardware import load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import TrainWorkload
from autotune.training.memory import activation_bytes_per_layer
from tests.test_modelling_fixes import estimate

runner = CliRunner()
GB200 = load_hardware("gb200-nvl72")
BRIDGE = load_framework("megatron-bridge")
SEARCH = ["-m", "llama3-70b", "-H", "gb200-nvl72", "--gpus", "64", "-s", "8192", "-b", "256"]


def invoke(*args):
    return runner.invoke(app, [str(a) for a in args])


def test_an_nvfp4_gemm_runs_at_the_fp4_peak_with_half_a_byte_and_a_scale_per_value():
    # GB200: fp8 5,000 and fp4 10,000 dense TFLOP/s, both at the FP8 GEMM efficiency (no FP4 ceiling measured)
    kernels = Kernels(GB200, np.array([True, False]), fp4=np.array([False, True]))
    fp8_rate, fp4_rate = kernels.linear_flops_per_s
    assert fp8_rate == pytest.approx(5000e12 * GB200.efficiency.fp8_gemm)
    assert fp4_rate == pytest.approx(10000e12 * GB200.efficiency.fp8_gemm)
    assert NVFP4_BYTES == 0.5625 and FP4_CAST_BYTES == 3.125  # E2M1 + E4M3/16; read 2, write row- and column-wise
    assert list(kernels.linear_operand_bytes) == [1.0, 0.5625]
    # a large square GEMM is compute-bound: twice as fast in NVFP4; the casts are the memory-bound remainder
    m = n = k = 16384.0
    forward, dgrad, wgrad = kernels.linear_parts(np.array([m, m]), np.array([n, n]), np.array([k, k]))
    # compute-bound: 2mnk FLOPs times the pipeline fill (1 + 256/k), plus the fixed cost per GEMM
    for rate, time in ((fp8_rate, wgrad[0]), (fp4_rate, wgrad[1])):
        assert time == pytest.approx(2 * m * n * k / rate * (1 + 256 / k) + kernels.gemm_overhead_s, rel=1e-9)
    cast_fp8 = 4.0 * 2 * m * k / kernels.memory_bytes_per_s  # the framework default FP8_CAST_BYTES = 4
    cast_fp4 = FP4_CAST_BYTES * 2 * m * k / kernels.memory_bytes_per_s
    assert forward[0] - wgrad[0] == pytest.approx(cast_fp8, rel=1e-6)
    assert forward[1] - wgrad[1] == pytest.approx(cast_fp4, rel=1e-6)


def test_nvfp4_keeps_the_saved_gemm_inputs_at_0_5625_bytes():
    model = load_model("llama3-8b")  # h 4096, f 14336, 32 heads of 128, 8 KV heads, SwiGLU
    tokens, seq, tp, sp = (np.array([8192.0]), np.array([8192.0]), np.array([1.0]), np.array([False]))
    by = {p: activation_bytes_per_layer(model, tokens, seq, tp, sp, False, fp8=p == "fp8", fp4=p == "fp4")[0]
          for p in ("bf16", "fp8", "fp4")}
    # the kept GEMM inputs per token: the QKV and MLP inputs (2h), the attention output (h) and the SwiGLU output
    # (f): 2 x 4096 + 4096 + 14336 = 26,624 values, each 1 byte in fp8 and 0.5625 in NVFP4
    gemm_inputs = 8192.0 * (2 * 4096 + 4096 + 14336)
    assert by["bf16"] - by["fp8"] == pytest.approx(gemm_inputs * 1.0)
    assert by["fp8"] - by["fp4"] == pytest.approx(gemm_inputs * 0.4375)


def test_an_fp4_plan_is_faster_and_smaller_than_fp8_on_blackwell_and_its_mfu_is_against_the_fp4_peak():
    fields = dict(tp=2, pp=4, vp=5, sp=True, zero=1, mbs=1, recompute="none")
    fp8 = estimate("llama3-70b", GB200, 64, {**fields, "precision": "fp8"}, TrainWorkload(8192, 256), BRIDGE, 4)
    fp4 = estimate("llama3-70b", GB200, 64, {**fields, "precision": "fp4"}, TrainWorkload(8192, 256), BRIDGE, 4)
    assert fp4["tokens_per_s_per_gpu"] > fp8["tokens_per_s_per_gpu"]
    assert fp4["memory_breakdown_gib"]["activations"] < fp8["memory_breakdown_gib"]["activations"]
    assert fp4["mfu_peak"] == "fp4" and fp8["mfu_peak"] == "fp8"
    assert fp4["mfu"] == pytest.approx(fp4["tflops_per_gpu"] / 10000.0)


@pytest.mark.parametrize("framework", ["megatron-lm", "megatron-bridge"])
def test_an_nvfp4_plan_keeps_tes_row_and_column_wise_weight_copies_beside_its_bf16_weights(framework):
    # Neither the launch files (no --fp4-param-gather) nor Megatron-Bridge's bf16_with_nvfp4_mixed (fp8_param_gather
    # False, fp4_param unset) hold the parameters in NVFP4, and Megatron-Core passes is_first_microbatch, so TE
    # caches each GEMM weight in NVFP4 twice (row- and column-wise): 1.125 bytes a weight, whatever the framework's
    # fp8 cache (Bridge's is 0: its fp8 recipes hold fp8 parameters).  Llama-3 70B at TP2 on 20 layers a stage:
    # QKV 8192 x (8192 + 2 x 1024), O 8192 x 8192, MLP 3 x 8192 x 28672 = 855,638,016 weights a layer, half a GPU
    fw = load_framework(framework)
    fields = dict(tp=2, pp=4, vp=5, sp=True, zero=1, mbs=1, recompute="none")
    weights = {p: estimate("llama3-70b", GB200, 64, {**fields, "precision": p}, TrainWorkload(8192, 256), fw, 4)
               ["memory_breakdown_gib"]["weights"] for p in ("bf16", "fp4")}
    cache_gib = 20 * 855_638_016 / 2 * 1.125 / 2**30  # 8.965 GiB
    assert weights["fp4"] - weights["bf16"] == pytest.approx(cache_gib, rel=1e-6)


def test_search_offers_fp4_where_gpu_and_framework_train_in_it():
    result = invoke("search", *SEARCH, "--framework", "megatron-bridge", "--precision", "bf16,fp8,fp4", "--json")
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert plans[0]["plan"]["precision"] == "fp4"
    # not searched unless asked, and the header says it could be
    plain = invoke("search", *SEARCH, "--framework", "megatron-bridge", "--top", "1")
    assert plain.exit_code == 0, plain.output
    assert "(add --precision bf16,fp8,fp4 to search fp8 and fp4)" in plain.stdout


@pytest.mark.parametrize("framework, layout", [("torchtitan", "tp=2,sp=true,zero=3"),
                                               ("megatron-lm@2025-06", "tp=2,pp=4,sp=true,zero=1")])
def test_a_framework_without_nvfp4_refuses_an_fp4_plan_with_the_rule(framework, layout):
    result = invoke("predict", *SEARCH, "--framework", framework, "--plan", f"{layout},recompute=full,precision=fp4")
    assert result.exit_code == 1, result.output
    assert "does not offer fp4 (NVFP4) training (precision=fp4)" in result.output and "Traceback" not in result.output
    fp8 = invoke("predict", *SEARCH, "--framework", framework, "--plan", f"{layout},recompute=full,precision=fp8")
    assert fp8.exit_code == 0, fp8.output


def test_fp4_on_a_gpu_without_fp4_tensor_cores_is_refused():
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16",
                    "--precision", "fp4")
    assert result.exit_code == 2, result.output
    assert "has no fp4 tensor cores" in result.output and "Traceback" not in result.output


def test_megatron_writes_the_nvfp4_flags_and_the_other_formats_refuse(tmp_path):
    plan = "tp=4,pp=16,vp=8,sp=true,zero=1,mbs=1,recompute=none,precision=fp4"
    args = ["-m", "llama3-405b", "-H", "gb200-nvl72", "--gpus", "256", "-s", "8192", "-b", "1536", "--plan", plan]
    result = invoke("emit", *args, "--format", "megatron", "--out", tmp_path / "m")
    assert result.exit_code == 0, result.output
    script = (tmp_path / "m" / "megatron_pretrain_gpt.sh").read_text()
    assert "--fp4-format e2m1" in script and "--fp4-recipe nvfp4" in script and "--bf16" in script
    assert "--fp8-format" not in script and "--fp4-param-gather" not in script
    # 126 layers over 128 virtual stages: the embedding and the loss each take a stage of their own
    assert "--pipeline-model-parallel-layout" in script
    # torchtitan and DeepSpeed train no NVFP4: a plan they would otherwise run is refused, naming the framework
    fsdp = ["-m", "llama3-70b", "-H", "gb200-nvl72", "--gpus", "64", "-s", "8192", "-b", "256",
            "--plan", "tp=1,zero=3,recompute=full,precision=fp4"]
    for fmt, label in (("torchtitan", "torchtitan"), ("deepspeed", "deepspeed")):
        refused = invoke("emit", *fsdp, "--format", fmt, "--out", tmp_path / fmt)
        assert refused.exit_code == 2, refused.output
        assert f"{label} (newest profiled) does not offer fp4 (NVFP4) training (precision=fp4)" in refused.output
        assert not (tmp_path / fmt).exists() and "Traceback" not in refused.output
        assert invoke("emit", *fsdp[:-1], "tp=1,zero=3,recompute=full,precision=bf16", "--format", fmt,
                      "--out", tmp_path / f"{fmt}-bf16").exit_code == 0


def test_the_published_nvfp4_runs_are_predicted_from_what_a_user_states(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("validate", "--bundled", "dense-bridge", "--json")
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert report["skipped"] == [] and len(report["rows"]) == 42
    nvfp4 = [r for r in report["rows"] if r["id"].endswith("NVFP4")]
    assert len(nvfp4) == 4 and all(r["plan"]["precision"] == "fp4" for r in nvfp4)
    # nothing is fitted to them (docs/accuracy.md: 23.4 % MAPE, -23.0 % to +31.3 %)
    assert all(abs(r["error_pct"]) < 35.0 for r in nvfp4)


def test_the_rtx_pro_6000_has_fp4_cores_but_transformer_engine_trains_no_nvfp4_on_them(tmp_path):
    """Compute capability 12.0: TransformerEngine's NVFP4 training fails at its first quantized GEMM there, so the
    launch file would not start; the plan is refused with why, and a search of fp4 alone is an input error."""
    args = ["-m", "llama3-8b", "-H", "rtx-pro-6000-blackwell", "--gpus", "8", "-s", "4096", "-b", "32"]
    plan = ["--plan", "tp=1,zero=1,mbs=1,recompute=full,precision=fp4"]
    refused = invoke("predict", *args, *plan)
    assert refused.exit_code == 1 and "compute capability 10.0 to 11.x only, and it is 12.0" in refused.output
    emitted = invoke("emit", *args, *plan, "--format", "megatron", "--out", tmp_path / "m")
    assert emitted.exit_code == 2 and not (tmp_path / "m").exists()
    searched = invoke("search", *args, "--precision", "fp4")
    assert searched.exit_code == 2 and "Traceback" not in searched.output
    assert "fp4 tensor cores train nothing" in " ".join(searched.output.split())
    # its fp8 still trains, and on a B200 (10.0) fp4 does
    assert invoke("predict", *args, "--plan", "tp=1,zero=1,mbs=1,recompute=full,precision=fp8").exit_code == 0
    assert invoke("predict", "-m", "llama3-8b", "-H", "b200-sxm-180gb", "--gpus", "8", "-s", "4096", "-b", "32",
                  *plan).exit_code == 0


def test_explain_names_the_fastest_change_that_is_possible_when_a_rule_blocks_the_fastest():
    """torchtitan trains no NVFP4: explain said only that the rule binds (bf16 -> fp4 53.7% faster), hiding that
    bf16 -> fp8, 35% faster, fits."""
    result = invoke("explain", "-p", "tp=2,zero=3,mbs=1,precision=bf16,recompute=full", "-m", "llama3-70b", "-H",
                    "gb200-nvl72", "-n", "64", "-s", "8192", "-b", "128", "--framework", "torchtitan")
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "the rule 'fp4 the framework does not offer' binds: precision bf16 -> fp4 would be" in text
    assert "; precision bf16 -> fp8 is " in text and "faster and fits" in text


def test_the_nvfp4_compute_capabilities_are_those_the_refusal_names():
    """The refusal says 10.0 to 11.x (it said 10.x only, while the rule let 11.x through): TransformerEngine's own
    check asks for 10.0 or later, and only 12.x fails at its first quantized GEMM."""
    import dataclasses

    from autotune.inputs.hardware import load_hardware
    from autotune.training.space import trains_in

    b200 = load_hardware("b200-sxm-180gb")
    at = {cc: trains_in(dataclasses.replace(b200, compute_capability=cc), "fp4") for cc in (9.0, 10.0, 10.3, 11.0,
                                                                                              12.0, 12.1)}
    assert at == {9.0: False, 10.0: True, 10.3: True, 11.0: True, 12.0: False, 12.1: False}
