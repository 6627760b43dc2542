"""Serving: decode roofline numbers checked by hand, KV capacity, SLO ranking, capacity, validation, launch commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import predicted
from autotune.errors import InputError
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import ServeWorkload
from autotune.search.serving import capacity_search, serve_search
from autotune.serving.estimate import (
    GIB,
    ServingParams,
    decode_weight_bytes_per_step,
    engine_memory,
    estimate_serving,
    kv_bytes_per_token,
    max_batch_fit,
)
from autotune.serving.plan import ServePlan, ServePlanBatch, parse_serve_plan
from autotune.serving.space import load_serve_space

DATA = Path(__file__).parent / "data" / "serving_runs_small.csv"
runner = CliRunner()

# Llama-3-70B by hand: per layer attention 8192*(8192+2*1024) + 8192*8192 = 150,994,944 and SwiGLU MLP
# 3*8192*28672 = 704,643,072 -> 80 layers = 68,451,041,280 quantised parameters; norms 80*2*8192 + 8192
# = 1,318,912 and the output layer 128256*8192 = 1,050,673,152 stay bf16.
LAYERS = 68_451_041_280
BF16_REST = (1_318_912 + 1_050_673_152) * 2


# fp8 carries one fp32 scale per 128x128 block (DeepSeek/Qwen-style block scaling), int4 one bf16 scale per
# group of 128 weights, NVFP4 one fp8 scale per 16.
FP8 = 1.0 + 4 / (128 * 128)


@pytest.mark.parametrize("weights, per_param", [("bf16", 2.0), ("fp8", FP8), ("int8", 1.0), ("int4", 0.5 + 2 / 128),
                                               ("fp4", 0.5 + 1 / 16), ("mxfp4", 0.5 + 1 / 32)])
def test_decode_weight_bytes_llama3_70b(weights, per_param):
    model = load_model("llama3-70b")
    assert decode_weight_bytes_per_step(model, weights) == pytest.approx(LAYERS * per_param + BF16_REST)


def test_weight_bytes_hand_values():
    model = load_model("llama3-70b")
    assert decode_weight_bytes_per_step(model, "bf16") == pytest.approx(139.006e9, rel=1e-5)
    assert decode_weight_bytes_per_step(model, "fp8") == pytest.approx(70.572e9, rel=1e-5)
    assert decode_weight_bytes_per_step(model, "int4") == pytest.approx(37.399e9, rel=1e-5)


def test_kv_bytes_per_token():
    model = load_model("llama3-70b")
    assert kv_bytes_per_token(model, "bf16") == 2 * 80 * 8 * 128 * 2 == 327_680
    assert kv_bytes_per_token(model, "fp8") == 163_840


def _batch(n_gpus, **kw):
    return ServePlanBatch.from_plans([ServePlan(n_gpus=n_gpus, **kw)])


def test_kv_capacity_by_hand():
    """vLLM's rule: --gpu-memory-utilization (0.92 in 0.33) caps weights, non-torch memory, activations,
    CUDA graphs and the KV cache together; the KV pool is what is left."""
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    cluster = Cluster(hw, 8, 8)
    plans = _batch(8, tp=8, weights="fp8", kv="fp8")
    # layers at fp8 (+ block scales) split 8 ways; embedding and output layer bf16, vocabulary-parallel; norms bf16
    weights_per_gpu = LAYERS * FP8 / 8 + 2 * 1_050_673_152 * 2 / 8 + 1_318_912 * 2
    mem = engine_memory(model, cluster, plans, "vllm")
    assert mem.weights[0] == pytest.approx(weights_per_gpu)
    # of the 79.1 GiB CUDA reports for an H100 80GB (the total vLLM's fraction applies to)
    pool = 0.92 * 79.1 * GIB - weights_per_gpu - mem.runtime[0] - mem.activations[0] - mem.cuda_graphs[0]
    assert mem.kv_pool[0] == pytest.approx(pool)
    assert 0.5 * GIB < mem.activations[0] < 4 * GIB  # an 8192-token chunk of 70B over 8 GPUs, and the sampler
    kv_per_token_per_gpu = 2 * 80 * 1 * 128 * 1  # one KV head per GPU at tp 8, fp8
    assert max_batch_fit(model, cluster, plans, 2304)[0] == int(pool // (kv_per_token_per_gpu * 2304))
    # A bf16 70B model does not fit one 80 GB GPU at all, under any engine's budget.
    for engine in ("vllm", "sglang", "trtllm"):
        assert max_batch_fit(model, Cluster(hw, 1, 8), _batch(1, weights="bf16"), 2304, engine)[0] == 0


def test_sglangs_sliding_window_pool_by_hand():
    """gpt-oss-120b: 18 full and 18 sliding (128-token window) layers of 8 KV heads x 64 x (K, V) = 1,024
    elements, 2,048 bytes a token-layer in bf16 (tp 1).  SGLang sizes a sliding pool of --swa-full-tokens-ratio
    0.8 times its full pool's tokens from the same budget (set_num_tokens_hybrid_swa), so a token of the full pool
    costs 18 x 2,048 + 0.8 x 18 x 2,048 = 66,355.2 bytes and a 2,048-token sequence 135,895,449.6: the 4.802 GiB
    pool (0.828 x 79.1 GiB less 60.693 GiB of weights) holds 37 of them, not the 64 that window-sized sliding pages give (18 x 2,048 x (2,048 + 128) =
    80,216,064 bytes a sequence: vLLM's hybrid allocator, kept).  Below the window the sliding pool runs out
    first: 100 tokens take 66,355.2 x 100 / 0.8 = 8,294,400 bytes (vLLM: 2 x 36,864 x 100 = 7,372,800)."""
    from autotune.serving import engines as E
    from autotune.serving.arch import model_scalars

    model, hw = load_model("gpt-oss-120b"), load_hardware("h100-sxm5-80gb")
    a = model_scalars(model)
    assert (a["n_full"], a["n_swa"], a["window"], a["kv_elems"]) == (18.0, 18.0, 128.0, 1024.0)

    def per_seq(engine, tokens):  # bytes of a tp-1 GPU's pool one sequence takes, bf16 KV
        return float(E.kv_pool_bytes_per_sequence(a, 2.0, 1.0, 1.0, tokens, E.swa_pool_ratio(engine)))

    def sglang(tokens):
        return per_seq("sglang", tokens)

    def vllm(tokens):
        return per_seq("vllm", tokens)

    assert sglang(2048.0) == pytest.approx(135_895_449.6)
    assert vllm(2048.0) == 80_216_064 == float(E.kv_bytes_per_sequence(a, 2.0, 1.0, 1.0, 2048.0))
    assert E.swa_pool_ratio("trtllm") == 0.0
    assert sglang(100.0) == pytest.approx(8_294_400.0) and vllm(100.0) == pytest.approx(7_372_800.0)
    plans = _batch(1, tp=1, weights="mxfp4", kv="bf16")
    cluster = Cluster(hw, 1, 8)
    pool = engine_memory(model, cluster, plans, "sglang").kv_pool[0]
    assert pool / GIB == pytest.approx(0.828 * 79.1 - 60.693, abs=1e-3)
    assert max_batch_fit(model, cluster, plans, 2048, "sglang")[0] == int(pool // 135_895_449.6) == 37
    assert int(pool // 80_216_064) == 64  # what the window-sized pages said
    from autotune.serving.calibrated import CURRENT

    est = estimate_serving(model, cluster, ServeWorkload(1024, 1024, concurrency=64), plans, CURRENT["sglang"],
                           engine="sglang")
    assert est.max_batch_fit[0] == 37
    vpool = engine_memory(model, cluster, plans, "vllm").kv_pool[0]
    assert max_batch_fit(model, cluster, plans, 2048, "vllm")[0] == int(vpool // 80_216_064)


def test_sglang_and_trtllm_budget_rules_by_hand():
    """SGLang's --mem-fraction-static caps weights plus KV (its default reserve for activations and CUDA graphs:
    512 MiB + 1.5 MiB per chunk token + 1 GiB per 8 GPUs + 2 MiB per decode graph batch, at least 10 GiB on
    GPUs over 60 GiB); TensorRT-LLM gives the KV cache 0.9 of what weights and activations leave."""
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    cluster = Cluster(hw, 8, 8)
    plans = _batch(8, tp=8, weights="fp8", kv="fp8", max_batch=256)
    sg = engine_memory(model, cluster, plans, "sglang")
    reserve_mib = 512 + 8192 * 1.5 + 1024 + 256 * 2 + 58 * 8  # the graph batch is capped by max_running_requests;
    # 58 prefill graphs (token counts up to the 8,192-token chunk) at 8 MiB
    total_mib = 79.1 * 1024  # the total CUDA reports for an H100 80GB
    fraction = int((total_mib - reserve_mib) / total_mib * 1000) / 1000
    assert sg.knob[0] == pytest.approx(fraction)
    assert sg.kv_pool[0] == pytest.approx(fraction * 79.1 * GIB - sg.weights[0])
    trt = engine_memory(model, cluster, plans, "trtllm")
    free = 79.1 * GIB - trt.weights[0] - trt.activations[0] - trt.runtime[0] - trt.cuda_graphs[0]
    assert trt.kv_pool[0] == pytest.approx(0.9 * free)


def test_decode_is_memory_bound_at_batch_one_and_roofline():
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    params = ServingParams(weight_bandwidth=0.8, kv_bandwidth=0.8, step_us=0.0, layer_us=0.0, seq_us=0.0,
                           allreduce_us=1.0)
    cluster = Cluster(hw, 8, 8)
    plans = _batch(8, tp=8, weights="fp8", kv="fp8", max_batch=1)
    est = estimate_serving(model, cluster, ServeWorkload(1, 1000), plans, params)
    floor = decode_weight_bytes_per_step(model, "fp8") / 8 / (3350e9 * 0.8)  # every GPU streams its 1/8
    assert est.tpot_ms[0] / 1e3 > floor
    assert est.tpot_ms[0] / 1e3 < floor * 1.3  # plus all-reduce latency, KV and the head
    # Quantising the weights halves the weight stream: fp8 decodes faster than bf16 at batch 1.
    bf16 = estimate_serving(model, cluster, ServeWorkload(1, 1000), _batch(8, tp=8, max_batch=1), params)
    assert bf16.tpot_ms[0] > 1.6 * est.tpot_ms[0] * 0.9


def test_predict_json_shape():
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                                 "--input-len", "2048", "--output-len", "256",
                                 "--plan", "tp=4,pp=1,replicas=2,weights=fp8,kv=fp8,max_batch=64", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["plan"] == {"mode": "agg", "tp": 4, "pp": 1, "dp": 1, "ep": 1, "weights": "fp8", "kv": "fp8",
                           "max_batch": 64, "replicas": 2}
    for key in ("output_tokens_per_s", "output_tokens_per_s_per_gpu", "ttft_ms", "tpot_ms", "max_batch_fit",
                "memory_gib_per_gpu", "memory_budget_gib", "engine_memory_flag", "fits", "checkpoint", "weights_from"):
        assert key in doc["estimate"]
    assert doc["estimate"]["fits"] is True


def test_unsupported_precision_and_bad_plan():
    # TensorRT-LLM has no FP8 before Ada (vLLM and SGLang run it weight-only on Ampere, through Marlin)
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "a100-sxm4-80gb", "--gpus", "1",
                                 "--input-len", "128", "--output-len", "128", "--plan", "weights=fp8", "--engine",
                                 "trtllm", "--json"])
    assert result.exit_code == 1  # cannot run: exit 1, with the reason in the JSON
    assert json.loads(result.stdout)["estimate"]["infeasible_reason"] == "weight precision not supported by the GPU"
    with pytest.raises(ValueError, match="replicas is derived"):
        parse_serve_plan("tp=4,replicas=3", 8)
    with pytest.raises(InputError, match="--input-len"):
        ServeWorkload(0, 10)
    bad = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1",
                              "--output-len", "128"])
    assert bad.exit_code == 2 and "--input-len" in bad.output


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_no_fp8_on_a100_and_fp4_native_on_blackwell_weight_only_on_hopper(engine):
    model = load_model("llama3-8b")
    space = load_serve_space(None)
    hopper = {"bf16", "fp8", "int8", "int4"} | ({"fp4"} if engine == "vllm" else set())  # vLLM's Marlin NVFP4
    ampere = {"bf16", "int8", "int4"} | ({"fp8"} if engine == "vllm" else set())  # vLLM's FP8 Marlin, weight-only
    for gpu, allowed in (("a100-sxm4-80gb", ampere), ("h100-sxm5-80gb", hopper),
                         ("b200-sxm-180gb", {"bf16", "fp8", "int8", "int4", "fp4"})):
        result = serve_search(model, Cluster(load_hardware(gpu), 1, 8), ServeWorkload(128, 128), space, ServingParams(),
                              top=5000, engine=engine)
        assert {r.plan.weights for r in result.ranked} == allowed
        if gpu.startswith("a100"):
            assert {r.plan.kv for r in result.ranked} == {"bf16"}


def test_slo_ranking_puts_misses_last_and_shows_them():
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    workload = ServeWorkload(2048, 256, ttft_ms=2000, tpot_ms=30)
    result = serve_search(model, Cluster(hw, 8, 8), workload, load_serve_space(None), ServingParams(), top=10_000)
    flags = [r.estimate["meets_targets"] for r in result.ranked]
    assert any(flags) and not all(flags)
    assert flags == sorted(flags, reverse=True)  # every plan that meets the targets comes first
    for r in result.ranked:
        if r.estimate["meets_targets"]:
            assert r.estimate["tpot_ms"] <= 30 and r.estimate["ttft_ms"] <= 2000
        else:
            assert "misses" in r.estimate
    # among the plans that meet them, those the checkpoint (bf16 here) can run come first, then those that need
    # a pre-quantized checkpoint; each group by throughput
    met = [r for r in result.ranked if r.estimate["meets_targets"]]
    needs = [r.estimate["weights_from"] == "needs" for r in met]
    assert needs == sorted(needs) and any(needs) and not all(needs)
    for group in (False, True):
        values = [r.estimate["output_tokens_per_s"] for r, n in zip(met, needs) if n == group]
        assert values == sorted(values, reverse=True)


def test_capacity_finds_fewest_gpus():
    model, hw = load_model("llama3-8b"), load_hardware("h100-sxm5-80gb")
    workload = ServeWorkload(512, 128, ttft_ms=1000, tpot_ms=50, request_rate=20.0)
    found = capacity_search(model, hw, 8, 1, 16, workload, load_serve_space(None), ServingParams())
    assert found.n_gpus is not None
    assert all(m == 0 for g, m in found.tried[:-1])
    heavier = capacity_search(model, hw, 8, 1, 64, ServeWorkload(512, 128, ttft_ms=1000, tpot_ms=50, request_rate=200.0),
                              load_serve_space(None), ServingParams())
    assert heavier.n_gpus is not None and heavier.n_gpus > found.n_gpus


def test_search_cli_wall_time_and_output():
    result = runner.invoke(app, ["search", "--workload", "serve", "--model", "llama3-70b", "--hardware", "h100-sxm5-80gb",
                                 "--gpus", "8", "--input-len", "2048", "--output-len", "256", "--ttft-ms", "2000",
                                 "--tpot-ms", "50", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["plans"] and doc["search"]["elapsed_s"] < 10
    assert doc["plans"][0]["estimate"]["meets_targets"]
    assert doc["inputs"]["workload"] == "serve"


def test_validate_detects_serving_schema_on_fixture():
    result = runner.invoke(app, ["validate", str(DATA), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["schema"] == "serving"
    kinds = {(r["source_group"], r["kind"]) for r in doc["throughput_mape"]}
    assert ("TRTLLM_perf_overview_v0.14.0", "max-throughput") in kinds
    assert ("TRTLLM_perf_overview_v0.9.0_static", "static") in kinds
    assert any(r["kind"] == "prefill" for r in doc["ttft_mape"])
    skipped = {s["id"] for s in doc["skipped"]}
    assert {"TRT020-168", "TRT014-016"} <= skipped  # no architecture; GPU outside the profiles
    for row in doc["rows"]:
        if row["kind"] == "max-throughput":
            assert row["predicted_batch"] >= 1  # the engine's batch is predicted, never read
    assert all(abs(r["mape_pct"]) < 60 for r in doc["throughput_mape"])
    text = runner.invoke(app, ["validate", str(DATA)])
    assert text.exit_code == 0 and "Serving error by source group and kind" in text.stdout


GOLDEN_VLLM_REPLICA = """    CUDA_VISIBLE_DEVICES=4,5,6,7 \\
        vllm serve "$MODEL" \\
        --tensor-parallel-size 4 \\
        --pipeline-parallel-size 1 \\
        --quantization fp8_per_tensor \\
        --kv-cache-dtype fp8 \\
        --max-num-seqs 64 \\
        --max-num-batched-tokens 8192 \\
        --max-model-len 3072 \\
        --gpu-memory-utilization 0.92 \\
        --port 8001 &"""

GOLDEN_SGLANG = """    CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7 \\
        python -m sglang.launch_server \\
        --model-path "$MODEL" \\
        --tp-size 8 \\
        --ep-size 8 \\
        --kv-cache-dtype auto \\
        --max-running-requests 32 \\
        --chunked-prefill-size 8192 \\
        --context-length 5120 \\
        --mem-fraction-static 0.822 \\
        --host 0.0.0.0 \\
        --port 8000 &"""


def test_golden_launch_commands():
    """vLLM 0.33 and SGLang 0.5.23 spellings: online fp8 from a bf16 checkpoint is fp8_per_tensor; the memory
    flag is the budget the batch was checked against; the context length has slack (2304 -> 3072)."""
    result = runner.invoke(app, ["emit", "tp=4,pp=1,weights=fp8,kv=fp8,max_batch=64", "--format", "vllm", "-m", "llama3-70b",
                                 "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "2304"])
    assert result.exit_code == 0, result.output
    assert GOLDEN_VLLM_REPLICA in result.stdout
    assert "vllm-router" in result.stdout and result.stdout.count("vllm serve") == 2
    assert "vLLM 0.33" in result.stdout
    result = runner.invoke(app, ["emit", "tp=8,ep=8,weights=int4,max_batch=32", "--format", "sglang", "-m", "mixtral-8x7b",
                                 "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096"])
    assert result.exit_code == 0, result.output
    assert GOLDEN_SGLANG in result.stdout
    assert "SGLang 0.5.23" in result.stdout and "NEEDS A PRE-QUANTIZED INT4 CHECKPOINT" in result.stdout


def test_emit_quotes_model_path_and_reads_search_output(tmp_path):
    from autotune.outputs.emit.formats import serving_files

    plan = ServePlan(n_gpus=1, weights="bf16")
    files, _ = serving_files("vllm", plan, load_model("llama3-8b"), "h100-sxm5-80gb", 896, 128,
                             model_path="my model; rm -rf /")
    assert "MODEL='my model; rm -rf /'" in files["serve_vllm.sh"]
    out = tmp_path / "s"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2",
                                 "--input-len", "512", "--output-len", "128", "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    emitted = runner.invoke(app, ["emit", str(out / "plans.json"), "--format", "sglang"])
    assert emitted.exit_code == 0, emitted.output
    assert "--context-length 1024" in emitted.stdout  # 512 + 128 tokens with slack, rounded up to 1024


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_script_for_a_bundled_spec_asks_for_the_weights_instead_of_loading_its_name(engine, tmp_path):
    """llama3-405b names an architecture, not weights an engine can load: unless MODEL is set, the script stops
    with the weights to give (a catalogue id of that spec) instead of asking the engine for a repository
    'llama3-405b'."""
    import subprocess

    from autotune.outputs.emit.formats import serving_files

    plan = ServePlan(n_gpus=8, tp=8, weights="bf16")
    files, _ = serving_files(engine, plan, load_model("llama3-405b"), "h200-sxm-141gb", 896, 128)
    script = tmp_path / "serve.sh"
    script.write_text(files[f"serve_{engine}.sh"])
    assert "MODEL=llama3-405b" not in script.read_text()
    ran = subprocess.run(["bash", str(script)], capture_output=True, text=True, env={"PATH": "/usr/bin:/bin"})
    assert ran.returncode == 2
    assert "MODEL=meta-llama/Llama-3.1-405B" in ran.stderr and "--model-path" in ran.stderr


def test_training_still_requires_seq_len():
    result = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-b", "8"])
    assert result.exit_code == 2 and "--seq-len" in result.output


def _rows_and_params(model: str, plan: str, engine: str, input_len: int, concurrency: int):
    import dataclasses

    from autotune.serving.calibrated import params_for
    from autotune.serving.estimate import plan_rows, solve

    spec, cluster = load_model(model), Cluster(load_hardware("h200-sxm-141gb"), 8, 8)
    workload = ServeWorkload(input_len, 256, concurrency=concurrency)
    plans = ServePlanBatch.from_plans([parse_serve_plan(plan, 8)])
    rows = plan_rows(spec, cluster, workload, plans, engine, engine_memory(spec, cluster, plans, engine))
    p = params_for(engine)
    return solve(rows, p), solve(dataclasses.replace(rows, lockstep=0.0), p)


def test_attention_dp_ranks_in_lockstep_hold_every_decode_step_a_prefill_chunk_holds():
    """SGLang and vLLM step their attention-DP ranks of a MoE engine together: a prefill chunk on one rank
    holds the others' decode steps, so TPOT rises with the prefill load and the DP width, by the share of
    steps another rank prefills times what a chunk step costs over a decode step; TensorRT-LLM's attention-DP
    balance schedules the ranks' prefills together, and a dense model's DP ranks are replicas."""
    moe = "tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=512"
    locked, free = _rows_and_params("deepseek-v3", moe, "sglang", 4096, 256)
    assert locked["tpot_s"][0] > 1.2 * free["tpot_s"][0]
    # Little's law on the decode phase holds with the held steps: requests/s = decoding / (O-1) / TPOT
    assert locked["requests_per_s"][0] == pytest.approx(locked["decode_seqs"][0] / 255 / locked["tpot_s"][0], rel=1e-6)
    # bounded by every decode step lasting a prefill chunk: at most one whole prefill per decoded token
    assert locked["tpot_s"][0] - free["tpot_s"][0] < locked["prefill_s"][0]
    light_locked, light_free = _rows_and_params("deepseek-v3", moe, "sglang", 128, 8)
    assert light_locked["tpot_s"][0] < light_free["tpot_s"][0] * 1.05  # little prefill: little is held
    trt_locked, trt_free = _rows_and_params("deepseek-v3", moe, "trtllm", 4096, 256)
    assert trt_locked["tpot_s"][0] == pytest.approx(trt_free["tpot_s"][0])
    dense_locked, dense_free = _rows_and_params("llama3-8b", "tp=1,dp=8,max_batch=512", "sglang", 4096, 256)
    assert dense_locked["tpot_s"][0] == pytest.approx(dense_free["tpot_s"][0])


def test_lockstep_holds_decode_steps_under_a_request_rate_too():
    """The open loop pays the held steps too. (At the rate a closed loop of 256 users reaches, the open loop
    settles at fewer decoding sequences and a lower TPOT: with held steps the decode phase has a light and a
    congested state at the same rate, and the open loop takes the light one.)"""
    import dataclasses

    from autotune.serving.calibrated import params_for
    from autotune.serving.estimate import plan_rows, solve

    spec, cluster = load_model("deepseek-v3"), Cluster(load_hardware("h200-sxm-141gb"), 8, 8)
    plans = ServePlanBatch.from_plans([parse_serve_plan("tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=512", 8)])
    mem = engine_memory(spec, cluster, plans, "sglang")
    # the closed loop's staggered regime (no synchronised waves, which an open loop does not have)
    p = params_for("sglang").replace(sync_share=0.0)
    closed = solve(plan_rows(spec, cluster, ServeWorkload(4096, 256, concurrency=256), plans, "sglang", mem), p)
    rate = float(closed["requests_per_s"][0])
    rows = plan_rows(spec, cluster, ServeWorkload(4096, 256, request_rate=rate), plans, "sglang", mem)
    opened = solve(rows, p)
    unlocked = solve(dataclasses.replace(rows, lockstep=0.0), p)
    assert unlocked["tpot_s"][0] * 1.1 < opened["tpot_s"][0] <= closed["tpot_s"][0] * 1.001
    assert opened["decode_seqs"][0] == pytest.approx(rate * 255 * opened["tpot_s"][0], rel=1e-3)  # Little's law


def _simulate_adp_balance(lam: float, dp: int, timeout_s: float, n: int, seed: int) -> float:
    """TensorRT-LLM's attention-DP balance as an event simulation of its counter: the counter runs in every
    iteration in which not every rank has a context (pending or not) and restarts at each release; pending
    contexts go when the dp-th is there (one per rank) or when the counter reaches ``timeout_s``, and a
    timeout with nothing pending only restarts it."""
    rng = np.random.default_rng(seed)
    arrivals = np.cumsum(rng.exponential(1.0 / lam, n))
    start, pending, waited, served = 0.0, [], 0.0, 0
    for t in arrivals:
        if start + timeout_s <= t:  # the counter timed out (once or more) before this arrival
            if pending:
                waited += sum(start + timeout_s - a for a in pending)
                served += len(pending)
                pending = []
            start += timeout_s * np.floor((t - start) / timeout_s)
        pending.append(t)
        if len(pending) == dp:
            waited += sum(t - a for a in pending)
            served += dp
            start, pending = t, []
    return waited / served


@pytest.mark.parametrize("lam, dp, timeout_s", [(3.2, 8, 1.14), (0.5, 8, 1.2), (20.0, 4, 0.1), (2.0, 2, 0.3),
                                              (0.05, 8, 1.2)])
def test_attention_dp_balance_wait_matches_an_event_simulation(lam, dp, timeout_s):
    from autotune.serving.estimate import adp_balance_wait_s

    simulated = _simulate_adp_balance(lam, dp, timeout_s, 200_000, seed=dp)
    assert float(adp_balance_wait_s(lam, dp, timeout_s)) == pytest.approx(simulated, rel=0.03)


def test_attention_dp_balance_wait_limits_by_hand():
    from autotune.serving.estimate import adp_balance_wait_s

    # no timeout: the k-th of dp arrivals waits for the dp-k after it, (dp-1)/(2 lam) on average
    assert float(adp_balance_wait_s(3.2, 8, 1e9)) == pytest.approx(7 / 6.4, rel=1e-6)
    # requests rarer than the timeout: each waits for the end of the counter's cycle it lands in, T/2
    assert float(adp_balance_wait_s(1e-3, 8, 1.0)) == pytest.approx(0.5, rel=1e-3)
    assert float(adp_balance_wait_s(3.2, 1, 1.14)) == 0.0  # one rank: nothing to balance


def test_tensorrt_llm_attention_dp_balance_delays_the_first_token_only():
    """TensorRT-LLM holds a context request until every attention-DP rank has one (NVIDIA's recipes: timeout
    60 iterations): TTFT rises under a load where the ranks decode, TPOT does not; a single-rank engine, a
    disaggregated plan and SGLang do not wait."""
    import dataclasses

    from autotune.serving.calibrated import params_for
    from autotune.serving.estimate import plan_rows, solve

    spec, cluster = load_model("deepseek-v3"), Cluster(load_hardware("b200-sxm-180gb"), 8, 8)

    def both(plan: str, engine: str, users: int):
        plans = ServePlanBatch.from_plans([parse_serve_plan(plan, 8)])
        rows = plan_rows(spec, cluster, ServeWorkload(1024, 1024, concurrency=users), plans, engine,
                         engine_memory(spec, cluster, plans, engine))
        return solve(rows, params_for(engine)), solve(dataclasses.replace(rows, balance_iters=0.0), params_for(engine))

    adp = "tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=512"
    held, free = both(adp, "trtllm", 64)
    # the steps are not slower; with more users waiting for their first token, fewer decode (Little's law)
    assert free["tpot_s"][0] * 0.98 < held["tpot_s"][0] <= free["tpot_s"][0] * 1.0001
    # 64 users, ~20 ms steps and 1k output tokens: ~3 requests/s over 8 ranks, so the timeout (60 steps) binds
    assert 0.2 < held["ttft_s"][0] - free["ttft_s"][0] < 60 * held["tpot_s"][0]
    # 4 users on 8 ranks: at most the share of ranks that decode holds a context, for at most half a cycle
    few, few_free = both(adp, "trtllm", 4)
    assert 0 < few["ttft_s"][0] - few_free["ttft_s"][0] < 0.5 * 0.5 * 60 * few["tpot_s"][0] * 1.01
    dense = load_model("llama3-8b")  # a dense model's DP ranks are replicas: nothing to balance
    plans = ServePlanBatch.from_plans([parse_serve_plan("tp=1,dp=8,max_batch=512", 8)])
    rows = plan_rows(dense, cluster, ServeWorkload(1024, 1024, concurrency=256), plans, "trtllm",
                     engine_memory(dense, cluster, plans, "trtllm"))
    assert solve(rows, params_for("trtllm"))["ttft_s"][0] == pytest.approx(
        solve(dataclasses.replace(rows, balance_iters=0.0), params_for("trtllm"))["ttft_s"][0])
    for plan, engine in (("tp=8,ep=8,weights=fp8,kv=fp8", "trtllm"), (adp, "sglang"),
                         ("prefill_workers=1,prefill_tp=1,prefill_dp=4,prefill_ep=4,decode_workers=1,decode_tp=1,decode_dp=4,"
                          "decode_ep=4,weights=fp8,kv=fp8", "trtllm")):
        a, b = both(plan, engine, 64)
        assert a["ttft_s"][0] == pytest.approx(b["ttft_s"][0]), (plan, engine)


def test_ranking_shows_each_layout_once_when_max_batch_is_not_reached():
    # 64 users: a max_batch of 64, 128 or 512 gives the same plan at more memory; the table lists it once, with
    # the smallest limit, instead of filling ten rows with one layout
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    workload = ServeWorkload(2048, 256, concurrency=64)
    result = serve_search(model, Cluster(hw, 8, 8), workload, load_serve_space(None), ServingParams(), top=10)
    layouts = [tuple((k, v) for k, v in r.plan.as_dict().items() if k != "max_batch") for r in result.ranked]
    assert len(layouts) == len(set(layouts)) == 10
    assert all(r.plan.max_batch <= 64 for r in result.ranked)  # the smallest limit that holds the load
    # under the engine full (no concurrency) max_batch sets the load, and different limits stay apart
    full = serve_search(model, Cluster(hw, 8, 8), ServeWorkload(2048, 256), load_serve_space(None), ServingParams(),
                        top=50)
    keys = [tuple((k, v) for k, v in r.plan.as_dict().items() if k != "max_batch") for r in full.ranked]
    assert len(keys) > len(set(keys))


def test_engine_release_selects_its_parameters():
    """`--engine trtllm@0.14` predicts with TensorRT-LLM 0.14's parameters (fitted on its tables, as validate
    uses them for its rows); a 1.x or vLLM release with its family's; a 0.x release plans aggregated only."""
    from autotune.serving import calibrated
    from autotune.serving.engines import parse_engine

    assert parse_engine("trtllm") == ("trtllm", None)
    assert parse_engine("TensorRT-LLM@v0.14.0") == ("trtllm", "trtllm-0.14")
    assert parse_engine("sglang@0.5.1.post1") == ("sglang", "sglang-0.5")
    for bad in ("vllm@", "vllm@x", "tgi@1.0"):
        with pytest.raises(ValueError, match="engine"):
            parse_engine(bad)
    base = ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-p", "tp=8",
            "--input-len", "1024", "--output-len", "256", "--concurrency", "64", "--json"]
    tpot = {}
    for engine in ("trtllm", "trtllm@0.14", "trtllm@1.2", "vllm@0.12", "vllm"):
        result = runner.invoke(app, [*base, "--engine", engine])
        assert result.exit_code == 0, result.output
        tpot[engine] = json.loads(result.stdout)["estimate"]["tpot_ms"]
    assert tpot["trtllm@1.2"] == tpot["trtllm"] and tpot["vllm@0.12"] == tpot["vllm"]
    assert tpot["trtllm@0.14"] != tpot["trtllm"]
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    plans = ServePlanBatch.from_plans([ServePlan(8, tp=8)])
    legacy = estimate_serving(model, Cluster(hw, 8, 8), ServeWorkload(1024, 256, concurrency=64), plans,
                              calibrated.LEGACY["trtllm-0.14"], engine="trtllm")
    assert tpot["trtllm@0.14"] == pytest.approx(float(legacy.tpot_ms[0]))
    bad = runner.invoke(app, [*base[:9], "-p", "mode=disagg,prefill_tp=4,decode_tp=4", *base[11:],
                              "--engine", "trtllm@0.14"])
    assert bad.exit_code == 2 and "aggregated only" in bad.output and "Traceback" not in bad.output
    typo = runner.invoke(app, [*base, "--engine", "trtllm@latest"])
    assert typo.exit_code == 2 and "--engine" in typo.output and "MAJOR.MINOR" in typo.output
    searched = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                                   "--gpus", "8", "--input-len", "1024", "--output-len", "256", "--concurrency", "64",
                                   "--engine", "trtllm@0.14", "--json"])
    assert searched.exit_code == 0, searched.output
    assert {p["plan"]["mode"] for p in json.loads(searched.stdout)["plans"]} == {"agg"}


def test_engine_release_through_the_api_overlays_and_fixes(tmp_path):
    from autotune.search.api import ServingSearch, search_serving

    workload = ServeWorkload(2048, 256, ttft_ms=2000, tpot_ms=50, concurrency=64)
    # the API reads "trtllm@0.14" as the command line does: that release's parameters, agg plans, family in the file
    out = search_serving(ServingSearch(model="llama3-8b", hardware="h100-sxm5-80gb", gpus=8, workload=workload,
                                       engine="trtllm@0.14", top=10))
    assert len(out.result.ranked) == 10  # --top counts distinct plans (duplicates fall out before the cut)
    assert {r.plan.mode for r in out.result.ranked} == {"agg"} and out.request.engine == "trtllm"
    base = ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8",
            "--input-len", "2048", "--output-len", "256", "--concurrency", "64"]
    fixed = runner.invoke(app, [*base, "--engine", "trtllm@0.14", "--fix", "prefill_tp=2"])
    assert fixed.exit_code == 2 and "aggregated only" in fixed.output and "prefill_tp" in fixed.output
    # an overlay with only the 1.x set is not silently applied to a 0.x release; engines it lacks keep theirs
    overlay = tmp_path / "ov.yaml"
    overlay.write_text("schema: serving\nengines:\n  trtllm: {weight_bandwidth: 0.5}\n")
    refused = runner.invoke(app, [*base, "--engine", "trtllm@0.14", "--calibration", str(overlay)])
    assert refused.exit_code == 2 and "trtllm@0.14" in refused.output and "Traceback" not in refused.output
    applied = runner.invoke(app, [*base, "--engine", "trtllm@1.2", "--calibration", str(overlay), "--json"])
    assert applied.exit_code == 0, applied.output
    silicon = Path(__file__).resolve().parents[1] / "autotune" / "data" / "serving_silicon.csv"
    validated = runner.invoke(app, ["validate", str(silicon), "--calibration", str(overlay),
                                    "--json"])
    assert validated.exit_code == 0, validated.output
    empty = runner.invoke(app, [*base, "--calibration", ""])
    assert empty.exit_code == 2 and "must not be empty" in empty.output
    shown = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                                "1", "-p", "tp=1", "--input-len", "512", "--output-len", "128", "--engine",
                                "trtllm@0.14", "--json"])
    body = json.loads(shown.stdout)
    assert body["engine"] == "trtllm" and body["engine_release"] == "trtllm@0.14" and "0.14" in body["parameters"]


def test_a_search_runs_the_weights_its_checkpoint_holds():
    """gpt-oss ships MXFP4 experts (the catalogue records the checkpoint): the bundled space, which lists no
    mxfp4, searches it too, so the best plan runs from the weights the user has instead of needing another
    checkpoint; weights pinned by --fix stay pinned."""
    base = ["search", "--workload", "serve", "-m", "openai/gpt-oss-120b", "-H", "h100-sxm5-80gb", "--gpus", "8",
            "--input-len", "1024", "--output-len", "1024", "--top", "3", "--json"]
    result = runner.invoke(app, base)
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert plans[0]["plan"]["weights"] == "mxfp4"
    assert not plans[0]["estimate"].get("needs_checkpoint")
    pinned = runner.invoke(app, [*base, "--fix", "weights=fp8"])
    assert pinned.exit_code == 0, pinned.output
    assert {p["plan"]["weights"] for p in json.loads(pinned.stdout)["plans"]} == {"fp8"}
    # a space given with --space is searched as written, the bundled file too
    written = runner.invoke(app, [*base, "--space", "search_spaces/serve.yaml"])
    assert written.exit_code == 0, written.output
    assert "mxfp4" not in {p["plan"]["weights"] for p in json.loads(written.stdout)["plans"]}


def _serve(engine: str, users: int | None, output_len: int, input_len: int = 8192, rate: float | None = None) -> dict:
    load = ["--concurrency", str(users)] if rate is None else ["--request-rate", str(rate)]
    result = runner.invoke(app, ["predict", "--workload", "serve", "--engine", engine, "-m", "llama3-70b", "-H",
                                 "h100-sxm5-80gb", "--gpus", "8", "--input-len", str(input_len), "--output-len",
                                 str(output_len), *load, "--plan", "tp=8,weights=fp8,kv=fp8,max_batch=64", "--json"])
    return predicted(result)["estimate"]  # latency numbers, also where 8,192 + output tokens pass the context


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_one_user_is_never_held_by_its_own_next_prompt(engine):
    # A closed loop of one user sends its next prompt after the reply: its decode steps carry no prefill and
    # its prompt finds no queue, so TTFT and TPOT do not depend on the output length (at 2 tokens both were
    # read as interleaved with the user's own prefills: TPOT 18 ms against 9.5 ms at 1,024 tokens on vLLM).
    short, long = _serve(engine, 1, 2), _serve(engine, 1, 1024)
    assert short["tpot_ms"] == pytest.approx(long["tpot_ms"], rel=0.05)
    assert short["ttft_ms"] == pytest.approx(long["ttft_ms"], rel=0.05)


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_a_chunked_prefill_engine_holds_a_decoded_token_for_one_chunk_at_most(engine):
    # 64 users of 8,192-token prompts and 2-token replies: each step of a chunked-prefill engine carries one
    # 8,192-token budget of prompts, so a decoded token waits for one prompt's prefill, about one user's
    # TTFT (the model read 2,097 ms, a prefill of nine prompts per token).
    alone = _serve(engine, 1, 2)
    busy = _serve(engine, 64, 2)
    assert busy["tpot_ms"] <= 1.2 * (alone["ttft_ms"] + alone["tpot_ms"])
    assert busy["tpot_ms"] > 0.5 * alone["ttft_ms"]  # but it does wait for that chunk


def test_sglang_prefills_its_queue_before_the_next_decode_step():
    # SGLang runs a waiting prefill batch before the running decode batch (no mixed chunks by default), so
    # with many users the same token waits for several prompts, not one chunk.
    alone = _serve("sglang", 1, 2)
    assert _serve("sglang", 64, 2)["tpot_ms"] > 2.0 * alone["ttft_ms"]


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_a_deep_prompt_queue_holds_every_token_for_a_full_chunk(engine):
    # With 32 users' 8k-token prompts queued (TTFT many seconds), every step of a chunked-prefill engine carries
    # a full token budget: TPOT is that of 64 users. Scaling the whole wait by (C-1)/C read 16% less at 32.
    deep, deeper = _serve(engine, 32, 2), _serve(engine, 64, 2)
    assert deep["ttft_ms"] > 10 * deep["tpot_ms"]
    assert deep["tpot_ms"] >= 0.95 * deeper["tpot_ms"]


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
def test_a_request_rate_holds_a_token_for_one_chunk_at_most_as_a_closed_loop_does(engine):
    # Near capacity an open loop's token waits for one budget of prompts too, about one prompt's prefill (it
    # read t_dec/(1-rho): 549 ms at 99% of capacity on vLLM, twice the closed loop's 262 ms).
    alone, busy = _serve(engine, 1, 2), _serve(engine, 64, 2)
    rate = _serve(engine, None, 2, rate=0.99 * busy["requests_per_s"])
    assert rate["tpot_ms"] <= 1.2 * (alone["ttft_ms"] + alone["tpot_ms"])
    assert rate["tpot_ms"] <= 1.1 * busy["tpot_ms"]


@pytest.mark.parametrize("engine", ["vllm", "trtllm"])
@pytest.mark.parametrize("prompt", [4096, 8192])
def test_one_more_prompt_token_does_not_cut_the_wait_for_a_chunk(engine, prompt):
    # A step carries one token budget of prompts, split where it ends: the wait is continuous in the prompt
    # length (it was floor(budget / I) whole prompts, and one token past 4,096 halved TPOT).
    for users in (7, 64):  # 7: mostly synchronised waves, whose steps also hold budget/I prompts (was floor)
        at, past = _serve(engine, users, 4, input_len=prompt), _serve(engine, users, 4, input_len=prompt + 1)
        assert past["tpot_ms"] >= 0.98 * at["tpot_ms"]


def _predict(*args: str) -> dict:
    return predicted(runner.invoke(app, ["predict", "--workload", "serve", *args, "--json"]))["estimate"]


def test_a_lockstep_moe_engine_holds_a_token_for_one_budget_step_of_a_longer_prompt():
    # DP ranks of a MoE engine step together, so a token waits while another rank prefills a step of its token
    # budget; that step was the prompt over ceil(I/budget) chunks, so one token past 8,192 cut TPOT by 41%.
    args = ["--engine", "vllm", "-m", "deepseek-v3", "-H", "h200-sxm-141gb", "--gpus", "16", "--checkpoint", "fp8",
            "-p", "dp=16,ep=16,weights=fp8,kv=fp8", "--output-len", "2", "--concurrency", "6"]
    at, past = _predict(*args, "--input-len", "8192"), _predict(*args, "--input-len", "8193")
    assert past["tpot_ms"] >= 0.98 * at["tpot_ms"]


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_users_on_dense_dp_ranks_wait_as_on_replicas(engine):
    # A dense model's DP ranks are independent engines: two users on two ranks each decode uninterrupted, as on
    # two replicas (the others' share of a user's decoding time counted both users on one queue: 21 ms vs 12).
    common = ["--engine", engine, "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "8192",
              "--output-len", "2", "--concurrency", "2"]
    dp = _predict(*common, "-p", "tp=4,dp=2,weights=fp8,kv=fp8,max_batch=256")
    replicas = _predict(*common, "-p", "tp=4,replicas=2,weights=fp8,kv=fp8,max_batch=256")
    assert dp["tpot_ms"] == pytest.approx(replicas["tpot_ms"], rel=0.02)


def test_a_serving_search_without_targets_does_not_say_they_are_met(tmp_path):
    """With no --ttft-ms, --tpot-ms or --request-rate there is nothing to meet: the table shows '-', the best line
    says no target was set (it read "meets the targets" beside a 139 ms TPOT), the summary counts no plans meeting
    them, and explain's one-step table says a step runs."""
    base = ["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
            "--input-len", "1024", "--output-len", "256", "--top", "2"]
    result = CliRunner().invoke(app, base + ["--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "no latency target set (--ttft-ms, --tpot-ms)" in result.output
    assert "meet the targets" not in result.output and "meets the targets" not in result.output
    explained = CliRunner().invoke(app, ["explain", str(tmp_path / "s")])
    assert explained.exit_code == 0, explained.output
    assert "targets" not in explained.output.split("One step along each axis")[1].split("output tokens/s and")[0]
    assert "within the targets" not in explained.output and "runs" in explained.output
    targeted = CliRunner().invoke(app, base + ["--tpot-ms", "500"])
    assert targeted.exit_code == 0, targeted.output
    assert "meets the targets" in targeted.output
