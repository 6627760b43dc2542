"""Serving calibration: engine keys and properties, the pooled fallback, per-sequence cost, GQA re-reads,
finite rate-limited benchmarks, and the launch flags of the named releases."""

from __future__ import annotations

import numpy as np
import pytest

from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import ModelSpec
from autotune.inputs.workload import ServeWorkload
from autotune.serving import calibrated
from autotune.serving.calibrated import (
    engine_max_batch,
    engine_properties,
    params_for,
    params_for_gpu,
)
from autotune.serving.estimate import ServingParams, engine_for, estimate_serving
from autotune.serving.plan import ServePlan, ServePlanBatch
from autotune.serving.runs import engine_key

MISTRAL = ModelSpec(name="mistral-like", n_layers=32, hidden_size=4096, ffn_hidden_size=14336, n_heads=32, n_kv_heads=8,
                    head_dim=128, vocab_size=32000, mlp="swiglu")


@pytest.mark.parametrize("engine, version, group, key", [
    ("trtllm", "0.14.0 (Triton tensorrtllm_backend)", "", "trtllm-0.14-triton"),
    ("trtllm", "0.9.0 (static batching, gptSessionBenchmark)", "", "trtllm-0.9"),
    ("trtllm", "0.20 (PyTorch backend, trtllm-bench)", "", "trtllm-0.20"),
    ("TensorRT-LLM", "v0.21.0", "", "trtllm-0.21"),
    ("vllm", "v0.6.3.post1", "", "vllm-0.6"),
    ("sglang", "", "", "sglang"),
    ("", "", "TRTLLM_perf_overview_v0.14.0", "trtllm-0.14"),
])
def test_engine_key_from_columns(engine, version, group, key):
    assert engine_key(engine, version, group) == key


def test_engine_properties_come_from_the_release():
    assert engine_properties("trtllm-0.9")["kv_reread_fraction"] > 0
    assert engine_properties("trtllm-0.8")["kv_reread_fraction"] > 0  # older releases: same kernels
    for engine in ("trtllm-0.14", "trtllm-0.20", "vllm-0.6", "sglang-0.4", "unknown"):
        assert engine_properties(engine) == {}
    assert params_for("trtllm-0.9", "h100-sxm5-80gb").kv_reread_fraction > 0
    assert params_for("vllm-0.8", "h100-sxm5-80gb").kv_reread_fraction == 0


def test_engine_max_batch_defaults():
    assert engine_max_batch("trtllm-0.14") == 2048
    assert engine_max_batch("vllm-0.6") == 256
    assert engine_max_batch("vllm-0.8") == 1024
    assert engine_max_batch("sglang-0.4") == 2048


def test_unknown_engine_and_gpu_fall_back_to_pooled_fits():
    assert calibrated.FITTED and calibrated.POOLED and calibrated.POOLED_ALL
    gpu = next(iter(calibrated.POOLED))
    unknown = params_for("vllm-0.8", gpu)
    for name, value in calibrated.POOLED[gpu].items():
        assert getattr(unknown, name) == pytest.approx(value)
    pooled_all = params_for("vllm-0.8", "no-such-gpu")
    for name, value in calibrated.POOLED_ALL.items():
        assert getattr(pooled_all, name) == pytest.approx(value)
    own = next(iter(calibrated.FITTED))
    for name, value in calibrated.FITTED[own].items():
        assert getattr(params_for(*own), name) == pytest.approx(value)
    # Planning on a GPU without serving runs says where its parameters come from.
    _, note = params_for_gpu("no-such-gpu")
    assert "pooled" in note


def _plans(n=1, **kw):
    return ServePlanBatch.from_plans([ServePlan(n_gpus=n, **kw)])


def test_kv_reread_fraction_scales_attention_traffic_by_group():
    hw = load_hardware("h100-sxm5-80gb")
    cluster = Cluster(hw, 1, 8)
    shared = engine_for(MISTRAL, cluster, _plans(), ServingParams())
    per_head = engine_for(MISTRAL, cluster, _plans(), ServingParams(kv_reread_fraction=1.0))
    half = engine_for(MISTRAL, cluster, _plans(), ServingParams(kv_reread_fraction=0.5))
    # group of 4 query heads per KV head: 4x the traffic at fraction 1, 1 + 3/2 at 0.5; capacity unchanged
    assert per_head.kv_read_per_token_gpu[0] == pytest.approx(4 * shared.kv_read_per_token_gpu[0])
    assert half.kv_read_per_token_gpu[0] == pytest.approx(2.5 * shared.kv_read_per_token_gpu[0])
    assert per_head.kv_per_token_gpu[0] == shared.kv_per_token_gpu[0] == 2 * 32 * 8 * 128 * 2


def test_seq_overhead_adds_time_per_decoding_sequence():
    hw = load_hardware("h100-sxm5-80gb")
    cluster = Cluster(hw, 1, 8)
    plans = _plans(max_batch=64)
    base = ServingParams(step_overhead_us=100.0)
    a = estimate_serving(MISTRAL, cluster, ServeWorkload(128, 128), plans, base)
    b = estimate_serving(MISTRAL, cluster, ServeWorkload(128, 128), plans, base.replace(seq_overhead_us=10.0))
    assert b.tpot_ms[0] - a.tpot_ms[0] == pytest.approx(64 * 10.0 / 1e3)


def test_rate_row_over_capacity_runs_at_the_benchmark_batch():
    """Over capacity the engine's batch is the request set or the engine limit, never the whole KV cache."""
    from autotune.serving.runs import ServingRun
    from autotune.serving.validation import predict_run

    run = ServingRun(id="x", source_group="g", engine="trtllm-0.14-triton", kind="rate", model=MISTRAL,
                     gpu="h100-sxm5-80gb", n_gpus=1, tp=1, pp=1, weights="bf16", kv=("bf16",), input_len=512,
                     output_len=256, batch=None, request_rate=1e4, measured_tokens_per_s_per_gpu=None,
                     measured_ttft_ms=None, measured_itl_ms=None)
    hw = load_hardware("h100-sxm5-80gb")
    pred = predict_run(run, hw, params_for(run.engine, run.gpu), requests=100)
    assert pred.batch == pytest.approx(100)
    assert np.isfinite(pred.itl_ms) and pred.ttft_ms is None
    low = predict_run(run.__class__(**{**run.__dict__, "request_rate": 0.5}), hw, params_for(run.engine, run.gpu),
                      requests=100)
    # a finite run at a low rate: N*O over (N / rate + one request's latency), a little under rate*O
    assert low.tokens_per_s_per_gpu < 0.5 * 256
    assert low.tokens_per_s_per_gpu == pytest.approx(0.5 * 256, rel=0.05)


# --- launch flags: verified against vLLM 0.8.x `vllm serve --help` (docs.vllm.ai/en/v0.8.5 engine args) and
# SGLang's server-argument reference (docs/advanced_features/server_arguments.md) ------------------------------

VLLM_FLAGS = {"--tensor-parallel-size", "--pipeline-parallel-size", "--quantization", "--kv-cache-dtype",
              "--max-num-seqs", "--max-model-len", "--gpu-memory-utilization", "--dtype", "--port",
              "--enable-expert-parallel"}
SGLANG_FLAGS = {"--model-path", "--tp-size", "--pp-size", "--ep-size", "--quantization", "--kv-cache-dtype",
                "--max-running-requests", "--context-length", "--mem-fraction-static", "--dtype", "--port"}


def _ctx(**plan):
    from autotune.outputs.emit.vllm import ServeContext

    return ServeContext(plan=ServePlan(**plan), model=MISTRAL, hardware="h100-sxm5-80gb", max_model_len=4096)


def _flags(groups):
    return [g[0] for g in groups if isinstance(g[0], str) and g[0].startswith("--")]


@pytest.mark.parametrize("weights, kv", [("bf16", "bf16"), ("fp8", "fp8"), ("int8", "bf16"), ("int4", "fp8"), ("fp4", "fp8")])
def test_vllm_flags_and_values(weights, kv):
    from autotune.outputs.emit.vllm import vllm_groups

    groups = vllm_groups(_ctx(n_gpus=8, tp=4, pp=2, weights=weights, kv=kv, max_batch=128), 8000)
    assert set(_flags(groups)) <= VLLM_FLAGS
    values = {g[0]: g[1] for g in groups if len(g) == 2}
    assert values["--kv-cache-dtype"] in ("auto", "fp8")  # vLLM 0.8 choices: auto, fp8, fp8_e5m2, fp8_e4m3
    assert values.get("--quantization") in (None, "fp8", "awq")
    assert values["--tensor-parallel-size"] == 4 and values["--pipeline-parallel-size"] == 2


@pytest.mark.parametrize("weights, kv", [("bf16", "bf16"), ("fp8", "fp8"), ("int8", "bf16"), ("int4", "fp8"), ("fp4", "fp8")])
def test_sglang_flags_and_values(weights, kv):
    from autotune.outputs.emit.sglang import sglang_groups

    groups = sglang_groups(_ctx(n_gpus=8, tp=4, pp=2, weights=weights, kv=kv, max_batch=128), 30000)
    assert set(_flags(groups)) <= SGLANG_FLAGS
    values = {g[0]: g[1] for g in groups if len(g) == 2}
    assert values["--kv-cache-dtype"] in ("auto", "fp8_e4m3", "fp8_e5m2")
    assert values.get("--quantization") in (None, "fp8", "awq", "w8a8_int8", "modelopt_fp4")
    assert values["--tp-size"] == 4 and values["--pp-size"] == 2
