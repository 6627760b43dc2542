"""Serving parameters: engine keys and properties, which calibration an engine release gets, GQA re-reads,
per-sequence cost, finite rate-limited benchmarks, and the launch flags of the targeted releases."""

from __future__ import annotations

from pathlib import Path

import dataclasses
from types import MappingProxyType

import numpy as np
import pytest

from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import ModelSpec
from autotune.inputs.workload import ServeWorkload
from autotune.serving import calibrated
from autotune.serving.arch import gpu_scalars, model_scalars, precision_arrays
from autotune.serving.calibrated import engine_properties, params_for
from autotune.serving.estimate import SERVING_PARAM_BOUNDS, ServingParams, decode_step_s, estimate_serving, prefill_s
from autotune.serving.plan import ServePlan, ServePlanBatch
from autotune.serving.runs import engine_key
from autotune.serving.validation import engine_max_batch

MISTRAL = ModelSpec(name="mistral-like", n_layers=32, hidden_size=4096, ffn_hidden_size=14336, n_heads=32, n_kv_heads=8,
                    head_dim=128, vocab_size=32000, mlp="swiglu")
FLAGS = Path(__file__).parent / "data" / "engine_flags"


@pytest.mark.parametrize("engine, version, key", [
    ("trtllm", "0.14.0 (Triton tensorrtllm_backend)", "trtllm-0.14-triton"),
    ("trtllm", "0.9.0 (static batching, gptSessionBenchmark)", "trtllm-0.9"),
    ("trtllm", "0.20 (PyTorch backend, trtllm-bench)", "trtllm-0.20"),
    ("TensorRT-LLM", "v0.21.0", "trtllm-0.21"),
    ("vllm", "v0.6.3.post1", "vllm-0.6"),
    ("sglang", "", "sglang"),
    ("", "", "vllm"),  # no engine named: the default engine, never one read from the source's name
])
def test_engine_key_from_columns(engine, version, key):
    assert engine_key(engine, version) == key


def test_engine_properties_come_from_the_release():
    assert engine_properties("trtllm-0.9")["kv_reread_fraction"] > 0
    assert engine_properties("trtllm-0.8")["kv_reread_fraction"] > 0  # older releases: same kernels
    for engine in ("trtllm-0.14", "trtllm-0.20", "vllm-0.6", "sglang-0.4", "unknown"):
        assert engine_properties(engine) == {}
    assert params_for("trtllm-0.9").kv_reread_fraction > 0
    assert params_for("trtllm-0.8").kv_reread_fraction > 0
    assert params_for("vllm-0.8").kv_reread_fraction == 0


def test_engine_max_batch_defaults():
    assert engine_max_batch("trtllm-0.14") == 2048
    assert engine_max_batch("trtllm-0.14-triton") == 256
    assert engine_max_batch("vllm-0.6") == 256
    assert engine_max_batch("vllm-0.8") == 1024
    assert engine_max_batch("sglang-0.4") == 2048


def test_each_release_gets_its_own_or_its_familys_calibration():
    # the engines of the silicon data have their own fits; every engine of one calibration shares the kernel
    # and link parameters, and differs in its own (fixed costs, weight streaming, scheduler)
    for engine in ("vllm", "sglang", "trtllm"):
        assert params_for(engine) == calibrated.CURRENT[engine]
    assert calibrated.CURRENT["vllm"].gemm == calibrated.CURRENT["sglang"].gemm
    assert calibrated.CURRENT["vllm"].request_ms != calibrated.CURRENT["sglang"].request_ms
    # a release of a family: the family's fit; TensorRT-LLM 1.x: the current fit; 0.x: the nearest table's
    assert params_for("vllm-0.19") == calibrated.CURRENT["vllm"]
    assert params_for("sglang-0.5") == calibrated.CURRENT["sglang"]
    assert params_for("trtllm-1.2") == calibrated.CURRENT["trtllm"]
    assert params_for("trtllm-0.14-triton") == calibrated.LEGACY["trtllm-0.14"]
    assert params_for("trtllm-0.17").weight_bandwidth == calibrated.LEGACY["trtllm-0.14"].weight_bandwidth
    assert params_for("trtllm-0.19").weight_bandwidth == calibrated.LEGACY["trtllm-0.20"].weight_bandwidth
    assert params_for("unknown-engine") == calibrated.CURRENT["vllm"]


def _rows(model, hw, plans: ServePlanBatch, kv="bf16"):
    a, g = model_scalars(model), gpu_scalars(hw)
    q = precision_arrays([("bf16", "bf16", "bf16")] * len(plans), [g] * len(plans), [kv] * len(plans))
    return a, q, g


def test_kv_reread_fraction_scales_attention_traffic_by_group():
    hw = load_hardware("h100-sxm5-80gb")
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1)])
    a, q, g = _rows(MISTRAL, hw, plans)
    # attention-bound case: a long context, no weights or fixed costs in the way
    base = ServingParams(kv_bandwidth=0.5, weight_bandwidth=0.95, step_us=0, layer_us=0, seq_us=0, attention=0.75)
    one = np.array([1.0])

    def attention(p):
        slow = decode_step_s(a, q, g, p, np.array([64.0]), np.array([100_000.0]), one, one, one, one)
        weights_only = decode_step_s(a, q, g, p, np.array([64.0]), np.array([1.0]), one, one, one, one)
        return slow[0] - weights_only[0]

    shared, per_head, half = (attention(base.replace(kv_reread_fraction=f)) for f in (0.0, 1.0, 0.5))
    # a group of 4 query heads per KV head: 4x the traffic at fraction 1, 1 + 3/2 at 0.5
    assert per_head == pytest.approx(4 * shared, rel=0.02)
    assert half == pytest.approx(2.5 * shared, rel=0.02)


def test_seq_overhead_adds_time_per_decoding_sequence():
    hw = load_hardware("h100-sxm5-80gb")
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1)])
    a, q, g = _rows(MISTRAL, hw, plans)
    one = np.array([1.0])
    base = ServingParams(step_us=100.0, seq_us=0.0)
    t0 = decode_step_s(a, q, g, base, np.array([64.0]), np.array([256.0]), one, one, one, one)
    t1 = decode_step_s(a, q, g, base.replace(seq_us=10.0), np.array([64.0]), np.array([256.0]), one, one, one, one)
    factor = 1.0 if g["blackwell"] else base.older_overhead
    assert (t1 - t0)[0] == pytest.approx(64 * 10e-6 * factor)


def test_prefill_gemms_run_at_a_share_of_the_gpus_measured_ceiling():
    """A GPU's GEMMs are priced at its measured ceiling (reference_efficiency.gemm, MAMF) times the fitted share:
    the same GPU with a ceiling of 0.4 instead of 0.8 takes twice as long over a GEMM-bound prefill."""
    hw = load_hardware("h100-sxm5-80gb")
    assert gpu_scalars(hw)["gemm_ceiling"] == pytest.approx(0.803)
    half = dataclasses.replace(hw, reference_efficiency=MappingProxyType({"gemm": 0.4015}))
    none = dataclasses.replace(hw, reference_efficiency=MappingProxyType({}))
    assert gpu_scalars(none)["gemm_ceiling"] == pytest.approx(0.80)  # the documented default
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1)])
    # GEMMs only: no attention time, weights streamed for free, no fixed costs
    p = ServingParams(gemm=0.9, attention=1e9, weight_bandwidth=1e9, step_us=0, layer_us=0, moe_layer_us=0)
    one, n = np.array([1.0]), np.array([8192.0])

    def gemm_s(h):
        a, q, g = _rows(MISTRAL, h, plans)
        return prefill_s(a, q, g, p, n, one, one, one, one, np.array([16384.0]))[0]
    a = model_scalars(MISTRAL)
    flops = 2 * 8192 * (a["P_attn"] + a["P_dense"] + a["P_shared"]) + 2 * a["P_head"]  # the head: the last token
    assert gemm_s(hw) == pytest.approx(flops / (989.5e12 * 0.803 * 0.9), rel=1e-9)
    assert gemm_s(half) == pytest.approx(2 * gemm_s(hw), rel=1e-9)


def test_fitted_kernel_fractions_stay_inside_the_hardwares_ceilings():
    """The bundled fits never price a kernel above what the hardware reaches: GEMMs at most the measured ceiling,
    weight and KV streaming at most the read rate measured on an H200 (0.91 of the datasheet)."""
    assert SERVING_PARAM_BOUNDS["gemm"][1] == 1.0
    assert SERVING_PARAM_BOUNDS["weight_bandwidth"][1] == SERVING_PARAM_BOUNDS["kv_bandwidth"][1] == 0.91
    for table in (calibrated.CURRENT, calibrated.LEGACY):
        for engine, params in table.items():
            for name, (low, high) in SERVING_PARAM_BOUNDS.items():
                assert low <= getattr(params, name) <= high, (engine, name)


def test_rate_row_over_capacity_runs_at_the_benchmark_batch():
    """Over capacity the engine's batch is the request set or the engine limit, never the whole KV cache."""
    from autotune.serving.runs import ServingRun
    from autotune.serving.validation import validate_serving

    run = ServingRun(id="x", source_group="g", engine="trtllm-0.14-triton", kind="rate", model=MISTRAL,
                     gpu="h100-sxm5-80gb", n_gpus=1, tp=1, pp=1, weights="bf16", kv=("bf16",), input_len=512,
                     output_len=256, batch=None, request_rate=1e4, measured_tokens_per_s_per_gpu=1000.0,
                     measured_ttft_ms=None, measured_itl_ms=None)
    hw = {"h100-sxm5-80gb": load_hardware("h100-sxm5-80gb")}
    datasets = {"x": "synthetic, 100 requests", "y": "synthetic, 100 requests"}
    over = validate_serving([run], hw.__getitem__, datasets).rows[0]
    # the engine holds the 100 requests (its batch limit of 256 and the KV cache would allow more); at any time a
    # few of them are in their prefill, the rest decode
    assert 85 <= over.predicted_batch <= 100
    assert over.predicted_itl_ms and over.predicted_ttft_ms is None
    low = validate_serving([run.__class__(**{**run.__dict__, "id": "y", "request_rate": 0.5})], hw.__getitem__,
                           datasets).rows[0]
    # a finite run at a low rate: N*O over (N / rate + one request's latency), a little under rate*O
    assert low.predicted_tokens_per_s_per_gpu < 0.5 * 256
    assert low.predicted_tokens_per_s_per_gpu == pytest.approx(0.5 * 256, rel=0.05)
    assert low.predicted_ttft_ms is not None and low.predicted_ttft_ms < 1000


# --- launch flags: every option an emitted command passes exists in the targeted release ----------------------


def _options(name: str) -> set[str]:
    return set((FLAGS / name).read_text().split())


def _emitted_options(text: str, program: str) -> set[str]:
    found = set()
    # the script's guards (if [[ ... ]]; then echo '...'; exit 2; fi) are messages to the user, not engine options
    commands = "\n".join(line for line in text.splitlines() if not line.startswith("if [[ "))
    for word in commands.replace("\\\n", " ").split():
        if word.startswith("--"):
            found.add(word)
    return found


@pytest.mark.parametrize("plan, gpus, model", [
    ("tp=4,pp=2,weights=fp8,kv=fp8,max_batch=128", 16, "llama3-70b"),
    ("tp=8,pp=2,weights=bf16,max_batch=64", 16, "llama3-405b"),
    ("tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=512", 16, "mixtral-8x7b"),
    ("prefill_workers=2,prefill_tp=2,decode_workers=1,decode_tp=4,weights=fp8,kv=fp8,max_batch=128", 8, "llama3-70b"),
])
@pytest.mark.parametrize("fmt, engine_flags, router_flags", [
    ("vllm", "vllm-0.33.0.txt", "vllm-router-0.1.17.txt"),
    ("sglang", "sglang-0.5.23.txt", "sglang-router-0.3.2.txt"),
])
def test_every_emitted_flag_exists_in_the_targeted_release(plan, gpus, model, fmt, engine_flags, router_flags):
    from autotune.inputs.modelspec import load_model
    from autotune.outputs.emit.formats import serving_files
    from autotune.serving.plan import parse_serve_plan

    files, _ = serving_files(fmt, parse_serve_plan(plan, gpus), load_model(model), "h100-sxm5-80gb", 2048, 256)
    script = next(iter(files.values()))
    engine_part, _, router_part = script.partition("# the router")
    assert _emitted_options(engine_part, fmt) <= _options(engine_flags)
    assert _emitted_options(router_part, fmt) <= _options(router_flags) | _options(engine_flags) or not router_part


def test_estimate_speaks_for_the_engine_it_was_asked_about():
    hw = load_hardware("h100-sxm5-80gb")
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1, max_batch=64)])
    for engine in ("vllm", "sglang", "trtllm"):
        est = estimate_serving(MISTRAL, Cluster(hw, 1, 8), ServeWorkload(512, 128, concurrency=16), plans,
                               params_for(engine), engine=engine)
        assert est.engine == engine and est.fits[0]
        assert np.isfinite(est.ttft_ms[0]) and np.isfinite(est.tpot_ms[0])


def test_a_synchronised_wave_counts_its_prefill_once():
    """Hand-checked closed loop in whole waves (sync_share 1, no fixed TTFT costs): 16 users send 16k-token
    prompts together; one prompt fills a prefill step (vLLM's 8,192-token budget on 80 GiB), so the k-th prompt's
    first token comes after k prefills: TTFT = (16+1)/2 S.  After it a prompt waits for the other prompts behind
    it, (16-1)/2 S over its O-1 tokens, on top of the decode step of all 16: the wave's 16 S appear once in
    TTFT + (O-1) TPOT.  Without waves (sync_share 0) TPOT carries the others' prefill instead."""
    from autotune.serving.estimate import prefill_s

    hw = load_hardware("h100-sxm5-80gb")
    cluster = Cluster(hardware=hw, n_gpus=1, gpus_per_node=8)
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1, max_batch=16)])  # the KV pool holds 28
    a, q, g = _rows(MISTRAL, hw, plans)
    I, O, C = 16384, 257, 16
    one = np.array([1.0])
    wave = ServingParams(sync_share=1.0, request_ms=0.0, prompt_token_us=0.0, admission_steps=0.0)
    S = prefill_s(a, q, g, wave, np.array([float(I)]), one, one, one, one, np.array([8192.0]))[0]
    t_dec = decode_step_s(a, q, g, wave, np.array([float(C)]), np.array([I + O / 2.0]), one, one, one, one)[0]
    work = ServeWorkload(input_len=I, output_len=O, concurrency=C)
    est = estimate_serving(MISTRAL, cluster, work, plans, wave, engine="vllm")
    assert est.fits[0]
    ttft_s, tpot_s = est.ttft_ms[0] / 1e3, est.tpot_ms[0] / 1e3
    assert ttft_s == pytest.approx((C + 1) / 2 * S, rel=1e-6)
    assert tpot_s == pytest.approx(t_dec + (C - 1) / 2 * S / (O - 1), rel=1e-6)
    assert ttft_s + (O - 1) * tpot_s == pytest.approx(C * S + (O - 1) * t_dec, rel=1e-6)
    staggered = estimate_serving(MISTRAL, cluster, work, plans, wave.replace(sync_share=0.0), engine="vllm")
    assert staggered.ttft_ms[0] < est.ttft_ms[0] and staggered.tpot_ms[0] > t_dec * 1e3


def test_the_closed_loop_is_the_mixture_of_its_two_regimes():
    """A share s of the loop's time in synchronised waves, each regime solved on its own (a blend inside one fixed
    point gave a throughput above both regimes): the request rate and the decode count are (1-s) times the
    staggered regime's plus s times the wave's, TTFT and TPOT the regimes' weighted by the requests each serves,
    and Little's law holds for the mixture; a wave of 1k-token prompts prefills eight to a step of vLLM's
    8,192-token budget, the step one prefill of 8,192 tokens (the weights streamed once), not eight of one."""
    from autotune.serving.estimate import prefill_s

    hw = load_hardware("h100-sxm5-80gb")
    cluster = Cluster(hardware=hw, n_gpus=1, gpus_per_node=8)
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1, max_batch=64)])
    work = ServeWorkload(input_len=1024, output_len=256, concurrency=64)
    base = ServingParams(request_ms=0.0, prompt_token_us=0.0, admission_steps=0.0)
    est = {s: estimate_serving(MISTRAL, cluster, work, plans, base.replace(sync_share=s), engine="vllm")
           for s in (0.0, 0.3, 1.0)}
    for field in ("requests_per_s", "batch"):
        ends = (getattr(est[0.0], field)[0], getattr(est[1.0], field)[0])
        assert getattr(est[0.3], field)[0] == pytest.approx(0.7 * ends[0] + 0.3 * ends[1], rel=1e-9), field
    served = (0.7 * est[0.0].requests_per_s[0], 0.3 * est[1.0].requests_per_s[0])
    for field in ("ttft_ms", "tpot_ms"):
        ends = (getattr(est[0.0], field)[0], getattr(est[1.0], field)[0])
        mixed = (served[0] * ends[0] + served[1] * ends[1]) / sum(served)
        assert getattr(est[0.3], field)[0] == pytest.approx(mixed, rel=1e-9), field
    for e in est.values():  # Little's law on the decode phase: decoding = rate x (O-1) x TPOT
        assert e.batch[0] == pytest.approx(e.requests_per_s[0] * 255 * e.tpot_ms[0] / 1e3, rel=1e-6)
    a, q, g = _rows(MISTRAL, hw, plans)
    one = np.array([1.0])
    step = prefill_s(a, q, g, base, np.array([8 * 1024.0]), one, one, one, one, np.array([8192.0]), seqs=8.0)[0]
    single = prefill_s(a, q, g, base, np.array([1024.0]), one, one, one, one, np.array([8192.0]))[0]
    assert step < 8 * single  # batching prompts into one step is cheaper than one at a time
    # 64 prompts, 8 a step: 8 steps; the k-th step's prompts wait k steps, (8+1)/2 on average
    assert est[1.0].ttft_ms[0] / 1e3 == pytest.approx(4.5 * step, rel=1e-6)


def test_a_release_outside_the_measured_ones_is_said_to_be():
    from autotune.serving.calibrated import release_note

    assert "outside the releases measured there (vLLM 0.11-0.18)" in release_note("vllm-0.1")
    assert "outside the releases measured there (TensorRT-LLM 1.0-1.3)" in release_note("trtllm-99.9")
    assert "outside" not in release_note("vllm-0.15") and "outside" not in release_note("sglang-0.5")


@pytest.mark.parametrize("engine, gpu, runnable", [
    ("vllm", "h200-sxm-141gb", True),  # Marlin W4A16 NVFP4 (vllm-project/vllm#18000)
    ("sglang", "h100-sxm5-80gb", True),  # Marlin fallback (sgl-project/sglang#19652)
    ("trtllm", "h200-sxm-141gb", False),  # its NVFP4 kernels need Blackwell
    ("vllm", "a100-sxm4-80gb", False),  # before Hopper: not planned
    ("trtllm", "b200-sxm-180gb", True),  # native FP4 tensor cores
    ("vllm", "mi300x-192gb", False),  # ROCm: the Marlin kernels are CUDA-only
])
def test_nvfp4_weights_run_weight_only_on_hopper_where_the_engine_does(engine, gpu, runnable):
    from autotune.inputs.modelspec import load_model
    from autotune.serving.space import REASONS, rejection_reasons

    hw = load_hardware(gpu)
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=2, tp=2, weights="fp4")])
    code = int(rejection_reasons(load_model("llama3-70b"), Cluster(hw, 2, 2), plans, engine=engine)[0])
    assert (code == 0) == runnable, REASONS[code]
    if not runnable:
        assert REASONS[code] == "weight precision not supported by the GPU"


def test_mxfp4_runs_weight_only_on_an_amd_gpu_but_nvfp4_does_not():
    from autotune.inputs.modelspec import load_model
    from autotune.serving.space import SERVE_CATEGORIES, fp4_weight_only, rejection_reasons

    hw = load_hardware("mi300x-192gb")
    assert hw.vendor == "amd" and load_hardware("h100-sxm5-80gb").vendor == "nvidia"
    assert fp4_weight_only("vllm", hw) == frozenset({"mxfp4"})
    if "mxfp4" in SERVE_CATEGORIES["weights"]:
        plans = ServePlanBatch.from_plans([ServePlan(n_gpus=2, tp=2, weights="mxfp4")])
        assert int(rejection_reasons(load_model("gpt-oss-120b"), Cluster(hw, 2, 8), plans, engine="vllm")[0]) == 0


def test_tensorrt_llm_is_refused_on_an_amd_gpu():
    from typer.testing import CliRunner

    from autotune.cli import app

    common = ["--workload", "serve", "-m", "llama3-70b", "-H", "mi300x-192gb", "-n", "8", "--input-len", "1000",
              "--output-len", "200", "--concurrency", "8"]
    for command in (["predict", *common, "-p", "tp=8", "--engine", "trtllm"],
                    ["search", *common, "--engine", "trtllm@0.14"]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "TensorRT-LLM runs on NVIDIA GPUs only" in result.output and "mi300x-192gb" in result.output
        assert "Traceback" not in result.output
    assert CliRunner().invoke(app, ["predict", *common, "-p", "tp=8", "--engine", "vllm"]).exit_code == 0


def test_a_profile_vendor_is_checked(tmp_path):
    import yaml

    from autotune.errors import InputError

    data = yaml.safe_load((Path(__file__).parents[1] / "profiles/hardware/mi300x-192gb.yaml").read_text())
    data["vendor"] = "intel"
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="vendor.*must be one of nvidia, amd"):
        load_hardware(str(path))


@pytest.mark.parametrize("engine", ["bogus", "nim"])
def test_serving_runs_of_an_engine_autotune_does_not_model_are_skipped_with_the_reason(tmp_path, engine):
    """Not predicted under another engine's parameters (a 'bogus-0.14' key), and not a refusal of the whole file
    (held-back tables may hold NIM rows, which run TensorRT-LLM or vLLM inside): skipped, saying which engine."""
    import csv
    import json

    from typer.testing import CliRunner

    from autotune.cli import app

    bundled = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_runs.csv"
    with open(bundled, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows([{**rows[0], "engine": engine}, rows[1]])
    result = CliRunner().invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.stdout)
    assert [s["id"] for s in report["skipped"]] == [rows[0]["id"]]
    assert f"(engine={engine!r})" in report["skipped"][0]["reason"]
    assert [r["id"] for r in report["rows"]] == [rows[1]["id"]]


@pytest.mark.parametrize("cells, field", [
    ({"output_tokens_per_s": "inf"}, "output_tokens_per_s"),
    ({"output_tokens_per_s": "-5"}, "output_tokens_per_s"),  # not compared with, but a negative rate is damage
    ({"output_tokens_per_s": "0"}, "output_tokens_per_s"),  # a column not compared with is still a number
    ({"e2e_latency_s_p99": "nan"}, "e2e_latency_s_p99"),
])
def test_serving_runs_reader_refuses_damaged_cells(tmp_path, cells, field):
    import csv

    from typer.testing import CliRunner

    from autotune.cli import app
    from tests.test_bad_input import assert_user_error

    bundled = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_runs.csv"
    with open(bundled, newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows([{**rows[0], **cells}, rows[1]])
    for command in (["validate", str(path)], ["calibrate", str(path), "--out", str(tmp_path / "c.yaml")]):
        result = CliRunner().invoke(app, command)
        assert_user_error(result, field, rows[0]["id"])
    assert not (tmp_path / "c.yaml").exists()
