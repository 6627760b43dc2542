"""Serving as practitioners deploy it (issue 13): memory the emitted engine allows, checkpoint-aware quantization,
multi-node launch, engine data parallelism and routers, disaggregation, queueing, MoE with attention DP and wide EP."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import ServeWorkload
from autotune.outputs.emit.formats import serving_files
from autotune.serving.calibrated import CURRENT
from autotune.serving.estimate import GIB, ServingParams, estimate_serving
from autotune.serving.plan import ServePlan, ServePlanBatch, parse_serve_plan

runner = CliRunner()


def _flag(text: str, name: str) -> str:
    found = re.findall(rf"{re.escape(name)} (\S+)", text)
    assert found, f"{name} not in the script"
    return found[0]


def _run(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 0, result.output
    return result


# --- 1. memory = the engine's budget ---------------------------------------------------------------------------

@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_llama70b_on_8_h100_top_plan_fits_the_emitted_budget(tmp_path, engine):
    """The top plan's batch is achievable under the flags the emitted script passes: its weights, activations,
    CUDA graphs and the KV cache of max_batch full-length sequences fit the engine's own budget."""
    out = tmp_path / "s"
    _run(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
          "--input-len", "2048", "--output-len", "256", "--engine", engine, "--out", str(out), "--json"])
    doc = json.loads((out / "plans.json").read_text())
    best = doc["plans"][0]
    est, plan = best["estimate"], parse_serve_plan(",".join(f"{k}={v}" for k, v in best["plan"].items()), 8)
    script = _run(["emit", str(out / "plans.json"), "--format", engine]).stdout
    memory = est["memory_breakdown_gib"]
    if engine == "vllm":
        util = float(_flag(script, "--gpu-memory-utilization"))
        assert est["memory_gib_per_gpu"] <= util * 80 + 1e-6  # everything under --gpu-memory-utilization
        per_rank = int(_flag(script, "--max-num-seqs"))
        assert per_rank * plan.pools()[1].dp == plan.max_batch
    else:
        fraction = float(_flag(script, "--mem-fraction-static"))
        assert memory["weights"] + memory["kv_cache"] <= fraction * 80 + 1e-6  # weights + KV under the fraction
        assert memory["activations"] + memory["cuda_graphs"] + memory["runtime"] <= (1 - fraction) * 80
        # a dense model's --dp-size replicas each admit the flag (SGLang divides it among attention-DP ranks only)
        assert int(_flag(script, "--max-running-requests")) * plan.pools()[1].dp == plan.max_batch
    assert est["max_batch_fit"] >= plan.max_batch
    assert est["fits"]


def test_the_issue_example_no_longer_fits():
    """Eight single-GPU fp8 servers at batch 25: vLLM's 0.92 budget holds about 8 sequences of 2,304 tokens."""
    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=8, tp=1, weights="fp8", kv="fp8", max_batch=25)])
    est = estimate_serving(model, Cluster(hw, 8, 8), ServeWorkload(2048, 256), plans, CURRENT["vllm"], engine="vllm")
    assert not est.fits[0] and "KV-cache budget" in est.reason[0]
    assert 4 <= est.max_batch_fit[0] <= 12
    assert est.memory_breakdown_gib["kv_pool"][0] < 6  # GiB per GPU left for the KV cache


def test_memory_reserve_depends_on_model_and_batch():
    model, hw = load_model("llama3-8b"), load_hardware("h100-sxm5-80gb")
    big = load_model("llama3-70b")
    work = ServeWorkload(1024, 256)

    def parts(m, max_batch):
        plans = ServePlanBatch.from_plans([ServePlan(n_gpus=8, tp=8, weights="fp8", kv="fp8", max_batch=max_batch)])
        return estimate_serving(m, Cluster(hw, 8, 8), work, plans, CURRENT["vllm"]).memory_breakdown_gib

    small, large = parts(model, 32), parts(model, 1024)
    assert large["activations"][0] > small["activations"][0]  # the sampler's logits of max_batch rows
    assert large["cuda_graphs"][0] > small["cuda_graphs"][0]  # graphs captured up to the batch limit
    assert parts(big, 32)["cuda_graphs"][0] > small["cuda_graphs"][0]  # more layers
    assert parts(big, 32)["activations"][0] != small["activations"][0]


# --- 2. checkpoint-aware quantization ------------------------------------------------------------------------

@pytest.mark.parametrize("weights, checkpoint, vllm_flag, sglang_flag, needs", [
    ("fp8", "bf16", "fp8_per_tensor", "fp8", False),  # online quantization, the engines' current names
    ("fp8", "fp8", None, None, False),  # detected from the checkpoint's config
    ("fp8", "compressed-tensors", None, None, False),  # --quantization fp8 would be rejected here
    ("int4", "awq", None, None, False),
    ("int4", "gptq", None, None, False),
    ("int8", "compressed-tensors:int8", None, None, False),  # a container names its one scheme
    ("int4", "compressed-tensors", None, None, True),  # bare compressed-tensors holds fp8 only, not every scheme
    ("fp8", "modelopt", None, None, True),  # bare modelopt holds NVFP4
    ("int4", "bf16", None, None, True),  # a plan that needs a pre-quantized checkpoint
    ("int8", "bf16", None, None, True),
    ("fp4", "nvfp4", None, "modelopt_fp4", False),
    ("fp4", "modelopt", None, "modelopt_fp4", False),
    ("fp4", "bf16", None, None, True),  # the engines' online NVFP4 quantizes MoE experts only
    ("bf16", "fp8", None, None, True),
])
def test_quantization_flags_follow_the_checkpoint(weights, checkpoint, vllm_flag, sglang_flag, needs):
    plan = ServePlan(n_gpus=8, tp=8, weights=weights, kv="fp8", max_batch=64)
    model = load_model("llama3-70b")
    for fmt, expected in (("vllm", vllm_flag), ("sglang", sglang_flag)):
        files, est = serving_files(fmt, plan, model, "b200-sxm-180gb", 2048, 256, checkpoint=checkpoint)
        script = next(iter(files.values()))
        quant = re.findall(r"--quantization (\S+)", script)
        assert quant == ([expected] if expected else []), (fmt, quant)
        assert ("NEEDS A PRE-QUANTIZED" in script or "point MODEL at a bf16" in script) == needs
        assert ("needs_checkpoint" in est) == needs


def test_online_nvfp4_is_for_moe_experts():
    plan = ServePlan(n_gpus=8, tp=8, ep=8, weights="fp4", kv="fp8", max_batch=64)
    for fmt, flag in (("vllm", "nvfp4_per_token"), ("sglang", "nvfp4_online")):
        files, est = serving_files(fmt, plan, load_model("mixtral-8x7b"), "b200-sxm-180gb", 2048, 256)
        assert f"--quantization {flag}" in next(iter(files.values())) and est["weights_from"] == "online"


def test_search_says_when_a_plan_needs_a_prequantized_checkpoint():
    result = _run(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                   "--input-len", "1024", "--output-len", "256", "--fix", "weights=int4", "--top", "3", "--json"])
    plans = json.loads(result.stdout)["plans"]
    assert plans and all(p["estimate"]["weights_from"] == "needs" for p in plans)
    assert all("int4 checkpoint" in p["estimate"]["needs_checkpoint"] for p in plans)
    table = _run(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                  "--input-len", "1024", "--output-len", "256", "--fix", "weights=int4", "--top", "3"]).stdout
    assert "NEEDS" in table
    ok = _run(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
               "--input-len", "1024", "--output-len", "256", "--fix", "weights=int4", "--checkpoint", "awq",
               "--top", "3", "--json"])
    assert all(p["estimate"]["weights_from"] == "checkpoint" for p in json.loads(ok.stdout)["plans"])


def test_a_hugging_face_id_brings_its_checkpoint_and_a_bad_name_is_refused():
    doc = json.loads(_run(["search", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", "-H", "h200-sxm-141gb",
                           "--gpus", "8", "--input-len", "1024", "--output-len", "1024", "--top", "2", "--json"]).stdout)
    assert doc["inputs"]["checkpoint"] == "fp8"
    assert doc["plans"][0]["plan"]["weights"] == "fp8"  # what the checkpoint holds ranks first
    bad = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1",
                              "--input-len", "10", "--output-len", "10", "--checkpoint", "safetensors"])
    assert bad.exit_code == 2 and "--checkpoint" in bad.output
    bad = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1",
                              "--input-len", "10", "--output-len", "10", "--engine", "tgi"])
    assert bad.exit_code == 2 and "--engine" in bad.output


# --- 3. launch: multi-node, data parallelism, routers, context length ------------------------------------------

def _script(fmt, plan, gpus, model="llama3-70b", hw="h100-sxm5-80gb", io=(2048, 256), **kw):
    files, _ = serving_files(fmt, parse_serve_plan(plan, gpus), load_model(model), hw, *io, **kw)
    return next(iter(files.values()))


def _node(script: str, k: int) -> str:
    body = script.split(f"\n{k})\n", 1)[1]
    return body.split("\n    ;;", 1)[0]


def test_replicas_past_the_first_node_use_that_nodes_own_gpus():
    script = _script("vllm", "tp=4,weights=fp8,kv=fp8,max_batch=64", 16)
    assert "CUDA_VISIBLE_DEVICES=8" not in script and "12,13" not in script
    assert _node(script, 1).count("CUDA_VISIBLE_DEVICES=0,1,2,3") == 1
    assert _node(script, 1).count("CUDA_VISIBLE_DEVICES=4,5,6,7") == 1
    assert "vllm-router" in _node(script, 0) and script.count('"http://${ADDR[1]}:800') == 2


def test_an_engine_over_two_nodes_gets_the_multi_node_flags():
    vllm = _script("vllm", "tp=8,pp=2,weights=bf16,max_batch=64", 16, model="llama3-405b")
    head, other = _node(vllm, 0), _node(vllm, 1)
    assert "--nnodes 2" in head and "--node-rank 0" in head and '--master-addr "${ADDR[0]}"' in head
    assert "--node-rank 1" in other and "--headless" in other and "--port" not in other
    sg = _script("sglang", "tp=8,pp=2,weights=bf16,max_batch=64", 16, model="llama3-405b")
    assert "--nnodes 2" in _node(sg, 0) and "--node-rank 1" in _node(sg, 1)
    assert '--dist-init-addr "${ADDR[0]}:5000"' in _node(sg, 1)
    assert "vllm-router" not in vllm  # one server: no router


def test_engine_data_parallelism_and_wide_ep_over_nodes():
    dense = _script("vllm", "tp=1,dp=8,weights=fp8,kv=fp8,max_batch=512", 8, model="llama3-8b")
    assert "--data-parallel-size 8" in dense and "--max-num-seqs 64" in dense  # per DP rank
    assert "--dp-size 8" in _script("sglang", "tp=1,dp=8,weights=fp8,kv=fp8,max_batch=512", 8, model="llama3-8b")
    wide = _script("vllm", "tp=1,dp=16,ep=16,weights=fp8,kv=fp8,max_batch=2048", 16, model="deepseek-v3",
                   hw="h200-sxm-141gb", checkpoint="fp8")
    assert "--enable-expert-parallel" in wide and "--data-parallel-size 16" in wide
    assert "--data-parallel-size-local 8" in _node(wide, 1) and "--data-parallel-start-rank 8" in _node(wide, 1)
    assert "--headless" in _node(wide, 1) and "--quantization" not in wide
    sg = _script("sglang", "tp=1,dp=16,ep=16,weights=fp8,kv=fp8,max_batch=2048", 16, model="deepseek-v3",
                 hw="h200-sxm-141gb", checkpoint="fp8")
    assert "--tp-size 16" in sg and "--attn-dp-size 16" in sg and "--ep-size 16" in sg
    # vLLM's EP spans the whole engine: EP 4 inside TP 8 is SGLang's to express
    from autotune.errors import InputError
    with pytest.raises(InputError, match="vLLM 0.33 cannot express"):
        _script("vllm", "tp=8,ep=4,weights=bf16,max_batch=64", 8, model="mixtral-8x7b")
    assert "--ep-size 4" in _script("sglang", "tp=8,ep=4,weights=bf16,max_batch=64", 8, model="mixtral-8x7b")


def test_context_length_has_slack_within_the_models_limit():
    assert "--max-model-len 3072" in _script("vllm", "tp=8,weights=fp8,max_batch=64", 8)  # 2304 * 1.25 -> 3072
    tight = _script("vllm", "tp=8,weights=fp8,max_batch=8", 8, io=(7000, 1000), model="llama3-8b")
    assert "--max-model-len 8192" in tight  # Llama 3 8B's own limit


# --- 5. disaggregation -----------------------------------------------------------------------------------------

DISAGG = "prefill_workers=2,prefill_tp=2,decode_workers=1,decode_tp=4,weights=fp8,kv=fp8,max_batch=128"


def test_disaggregated_launch_flags():
    vllm = _script("vllm", DISAGG, 8)
    assert vllm.count('"kv_role":"kv_producer"') == 2 and vllm.count('"kv_role":"kv_consumer"') == 1
    assert "--vllm-pd-disaggregation" in vllm and vllm.count("--prefill ") == 2 and vllm.count("--decode ") == 1
    sg = _script("sglang", DISAGG, 8)
    assert sg.count("--disaggregation-mode prefill") == 2 and sg.count("--disaggregation-mode decode") == 1
    assert "--pd-disaggregation" in sg and sg.count("--disaggregation-bootstrap-port") == 2
    assert sg.count("--disaggregation-transfer-backend nixl") == 3


def test_vllm_disaggregated_servers_on_one_node_get_their_own_nixl_handshake_ports():
    """vLLM's NIXL handshake listens on VLLM_NIXL_SIDE_CHANNEL_PORT (default 5600 for every server) plus a rank: two
    servers on a node with the default would collide, and with the default host (localhost) a server on another node
    could not connect.  Each server gets its own block of 2 ports per GPU and its node's address."""
    def blocks(node_text):
        found = re.findall(r"CUDA_VISIBLE_DEVICES=(\S+) \\\n\s+VLLM_NIXL_SIDE_CHANNEL_HOST=(\S+) \\\n"
                           r"\s+VLLM_NIXL_SIDE_CHANNEL_PORT=(\d+)", node_text)
        return [(int(port), int(port) + 2 * len(devices.split(",")), host) for devices, host, port in found]

    one = blocks(_node(_script("vllm", DISAGG, 8), 0))
    assert len(one) == 3
    spans = sorted((lo, hi) for lo, hi, _ in one)
    assert all(a_hi <= b_lo for (_, a_hi), (b_lo, _) in zip(spans, spans[1:])), spans  # no shared port
    assert {host for *_, host in one} == {'"${ADDR[0]}"'}
    two = _script("vllm", "prefill_workers=2,prefill_tp=4,decode_workers=1,decode_tp=8,weights=fp8,kv=fp8,"
                          "max_batch=128", 16)
    assert {host for *_, host in blocks(_node(two, 1))} == {'"${ADDR[1]}"'}
    assert "VLLM_NIXL" not in _script("vllm", "tp=4,weights=fp8,kv=fp8,max_batch=64", 8)  # aggregated: no connector


def test_disaggregated_plans_are_searched_and_estimated():
    doc = json.loads(_run(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                           "--input-len", "4096", "--output-len", "256", "--fix", "mode=disagg", "--top", "5",
                           "--json"]).stdout)
    plans = doc["plans"]
    assert plans and all(p["plan"]["mode"] == "disagg" for p in plans)
    for p in plans:
        plan = p["plan"]
        gpus = sum(plan[f"{s}_workers"] * plan[f"{s}_tp"] * plan[f"{s}_pp"] * plan[f"{s}_dp"] for s in ("prefill", "decode"))
        assert gpus * plan["replicas"] == 8
        assert 0 < p["estimate"]["prefill_utilisation"] < 1  # rate matching: the prefill pool keeps up
    predicted = _run(["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                      "--input-len", "4096", "--output-len", "256", "--concurrency", "64", "-p", DISAGG, "--json"])
    assert json.loads(predicted.stdout)["plan"]["decode_tp"] == 4


def test_kv_handoff_crosses_the_link_between_the_pools():
    """The same 1P+1D system: inside an NVL72 rack the KV cache moves over NVLink, across H100 nodes over the NICs."""
    model = load_model("llama3-70b")
    plan = ServePlanBatch.from_plans([parse_serve_plan(
        "prefill_workers=1,prefill_tp=8,decode_workers=1,decode_tp=8,weights=fp8,kv=fp8,max_batch=64", 16)])
    work = ServeWorkload(16384, 128, concurrency=4)
    h100 = estimate_serving(model, Cluster(load_hardware("h100-sxm5-80gb"), 16, 8), work, plan, CURRENT["vllm"])
    gb200 = estimate_serving(model, Cluster(load_hardware("gb200-nvl72"), 16, 4), work, plan, CURRENT["vllm"])
    assert h100.ttft_ms[0] > gb200.ttft_ms[0]


# --- 4. queueing: TTFT under a concurrency and under a request rate -----------------------------------------------

def test_ttft_grows_with_users_and_with_the_request_rate():
    model, hw = load_model("llama3-8b"), load_hardware("h100-sxm5-80gb")
    plans = ServePlanBatch.from_plans([ServePlan(n_gpus=1, weights="fp8", kv="fp8", max_batch=256)])
    cluster = Cluster(hw, 1, 8)

    def ttft(**load):
        est = estimate_serving(model, cluster, ServeWorkload(2048, 256, **load), plans, CURRENT["vllm"])
        return est.ttft_ms[0], est

    values = [ttft(concurrency=c)[0] for c in (1, 16, 128, 512, 2048)]
    assert values == sorted(values) and values[-1] > 10 * values[0]
    # beyond the engine's batch limit the users wait for a slot: TTFT is mostly waiting
    assert values[-1] > 4 * values[-2]
    capacity = ttft(concurrency=256)[1].requests_per_s[0]
    rates = [ttft(request_rate=capacity * f)[0] for f in (0.1, 0.5, 0.9)]
    assert rates == sorted(rates) and rates[-1] > 1.5 * rates[0]
    over, est = ttft(request_rate=capacity * 2)
    assert not np.isfinite(over) and "exceeds capacity" in est.misses[0]


def test_chunked_prefill_streams_the_weights_once_per_chunk():
    from autotune.serving.arch import gpu_scalars, model_scalars, precision_arrays
    from autotune.serving.estimate import ServingParams, prefill_s

    model, hw = load_model("llama3-70b"), load_hardware("h100-sxm5-80gb")
    a, g = model_scalars(model), gpu_scalars(hw)
    q = precision_arrays([("fp8",) * 3], [g], ["fp8"])
    p, one = ServingParams(), np.array([1.0])
    small, whole = (prefill_s(a, q, g, p, np.array([32768.0]), one * 8, one, one, one, np.array([c]))[0]
                    for c in (512.0, 32768.0))
    assert small > whole  # 64 chunks each pay the step and layer costs and stream the weights


# --- 5. MoE: attention DP, wide EP, MLA --------------------------------------------------------------------------

def test_wide_ep_all_to_all_costs_more_over_the_network_than_in_an_nvl72_rack():
    model = load_model("deepseek-v3")
    plans = ServePlanBatch.from_plans([parse_serve_plan("tp=1,dp=32,ep=32,weights=fp8,kv=fp8,max_batch=2048", 32)])
    work = ServeWorkload(1024, 1024, concurrency=1024)
    rack = estimate_serving(model, Cluster(load_hardware("gb200-nvl72"), 32, 4), work, plans, CURRENT["sglang"],
                            engine="sglang")
    network = estimate_serving(model, Cluster(load_hardware("b200-sxm-180gb"), 32, 8), work, plans, CURRENT["sglang"],
                               engine="sglang")
    assert network.tpot_ms[0] > rack.tpot_ms[0] * 1.05


def test_attention_dp_with_attention_tp_dispatches_each_token_once():
    """An attention-DP rank of tp GPUs sends each of its tokens to the experts once (SGLang's scattered mode before
    the DeepEP dispatch): tp=2 x dp=4 with 64 sequences per rank moves as many bytes per GPU in its all-to-alls as
    tp=1 x dp=8 with 32 per rank; only its TP all-reduces come on top."""
    from autotune.serving.arch import class_formats, gpu_scalars, model_scalars, precision_arrays
    from autotune.serving.estimate import _allreduce_s, decode_step_s

    model, hw = load_model("deepseek-v3"), load_hardware("b200-sxm-180gb")
    a, g = model_scalars(model), gpu_scalars(hw)
    q = {k: v[0] for k, v in precision_arrays([class_formats(True, "fp8")], [g], ["fp8"]).items()}
    one = np.ones(1)

    fast, slow = CURRENT["sglang"].replace(link_bandwidth=1.0), CURRENT["sglang"].replace(link_bandwidth=0.5)

    def comm(tp, dp, b):  # the link-bandwidth-dependent part of a decode round: its collectives
        def step(p):
            return decode_step_s(a, q, g, p, b * one, 2048.0 * one, tp * one, one, dp * one, tp * dp * one)[0]
        return float(step(slow) - step(fast))

    wide, mixed = comm(1.0, 8.0, 32.0), comm(2.0, 4.0, 64.0)
    tp_bytes = 64.0 * a["h"] * 2.0  # one all-reduce of the rank's 64 tokens (bf16)
    allreduce = 2.0 * a["L"] * float(_allreduce_s(tp_bytes, 2.0, g, slow) - _allreduce_s(tp_bytes, 2.0, g, fast))
    assert wide > 0 and allreduce > 0
    assert mixed - allreduce == pytest.approx(wide, rel=1e-6)


def test_mla_caches_the_compressed_latent():
    model, hw = load_model("deepseek-v3"), load_hardware("h200-sxm-141gb")
    plans = ServePlanBatch.from_plans([parse_serve_plan("tp=8,weights=fp8,kv=fp8,max_batch=64", 8)])
    est = estimate_serving(model, Cluster(hw, 8, 8), ServeWorkload(4096, 1024), plans, CURRENT["sglang"],
                           engine="sglang")
    per_token = 61 * (512 + 64) * 1  # latent + RoPE key per layer, fp8, replicated on each TP rank
    assert est.memory_breakdown_gib["kv_cache"][0] * GIB == pytest.approx(64 * 5120 * per_token)
    dep = ServePlanBatch.from_plans([parse_serve_plan("tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=512", 8)])
    dep_est = estimate_serving(model, Cluster(hw, 8, 8), ServeWorkload(4096, 1024), dep, CURRENT["sglang"],
                               engine="sglang")
    # attention DP keeps one copy of each sequence's latent: several times the sequences of TP 8 (less than 8x:
    # each DP rank holds the attention weights whole)
    assert dep_est.max_batch_fit[0] > 4 * est.max_batch_fit[0]


def test_moe_search_offers_attention_dp_and_expert_parallelism_on_an_nvl72_rack():
    doc = json.loads(_run(["search", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", "-H", "gb200",
                           "--gpus", "64", "--input-len", "1024", "--output-len", "1024", "--concurrency", "4096",
                           "--engine", "sglang", "--top", "20", "--json"]).stdout)
    layouts = {(p["plan"].get("dp") or p["plan"].get("decode_dp"), p["plan"].get("ep") or p["plan"].get("decode_ep"))
               for p in doc["plans"]}
    assert any(dp and dp >= 16 and ep and ep >= 16 for dp, ep in layouts)


def test_when_no_plan_meets_the_targets_the_closest_are_shown():
    """Impossible targets: the command exits 1 and shows the plans closest to the targets (the sum of log(value /
    target) over the missed ones), not the fastest plans, which are the farthest from a latency target."""
    from autotune.inputs.workload import ServeWorkload
    from autotune.search.serving import miss_score

    base = ["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
            "--input-len", "1000", "--output-len", "200", "--top", "5", "--json"]
    result = runner.invoke(app, [*base, "--ttft-ms", "50", "--tpot-ms", "5"])
    assert result.exit_code == 1, result.output
    shown = json.loads(result.stdout)["plans"]
    workload = ServeWorkload(1000, 200, ttft_ms=50.0, tpot_ms=5.0)
    score = [float(miss_score(p["estimate"]["ttft_ms"], p["estimate"]["tpot_ms"], workload)) for p in shown]
    assert score == sorted(score) and not any(p["estimate"]["meets_targets"] for p in shown)
    fastest = json.loads(_run(base).stdout)["plans"][0]["estimate"]  # no targets: ranked by throughput
    assert score[0] < float(miss_score(fastest["ttft_ms"], fastest["tpot_ms"], workload))
    assert shown[0]["estimate"]["tpot_ms"] < fastest["tpot_ms"] / 3


def test_a_disaggregated_plan_shows_each_pools_memory_with_its_own_parts(tmp_path):
    """The headline was the fuller pool's (a prefill GPU holding all the weights at TP1) over the decode GPU's parts,
    which added up to a third of it: explain and emit name the decode GPU for its parts and give each pool's total.
    explain's headline is the figure search ranks and shows, said to be the fuller pool's."""
    out = tmp_path / "s"
    _run(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len",
          "1000", "--output-len", "200", "--fix", "mode=disagg", "--fix", "prefill_tp=1", "--fix", "max_batch=64",
          "--out", str(out)])  # a decode batch well inside its budget: the prefill GPU is the fuller one
    est = json.loads((out / "plans.json").read_text())["plans"][0]["estimate"]
    decode, prefill = est["decode_memory_gib_per_gpu"], est["prefill_memory_gib_per_gpu"]
    assert prefill > decode + 10 and est["memory_gib_per_gpu"] == pytest.approx(prefill)
    parts = est["memory_breakdown_gib"]
    assert decode == pytest.approx(sum(parts[k] for k in ("weights", "kv_cache", "activations", "cuda_graphs",
                                                            "runtime")))
    text = " ".join(_run(["explain", str(out), "--rank", "1"]).stdout.split())
    assert f"Memory {prefill:.1f} of 79.1 GiB per GPU (the fuller pool's); a decode GPU's parts" in text
    assert f"decode GPU, total │ {decode:.2f}" in text and f"prefill GPU, total │ {prefill:.2f}" in text
    script = _run(["emit", str(out / "plans.json"), "--format", "vllm"]).stdout
    assert f"({decode:.1f} GiB needed per decode GPU: weights {parts['weights']:.1f}," in script
    assert f"({prefill:.1f} GiB needed per prefill GPU)" in script


@pytest.mark.parametrize("engine, model, weights, runs", [
    ("vllm", "llama3-70b", "fp8", True),  # FP8 Marlin, weight-only (vllm-project/vllm#5975)
    ("vllm", "mixtral-8x7b", "fp8", True),  # ... for the fused MoE too
    ("vllm", "openai/gpt-oss-120b", "mxfp4", True),  # MXFP4 Marlin (vLLM's gpt-oss recipe lists A100)
    ("sglang", "llama3-70b", "fp8", True),  # SGLang's FP8 linear layers fall back to Marlin
    ("sglang", "mixtral-8x7b", "fp8", False),  # ... its FP8 MoE does not (sgl-project/sglang#12887)
    ("trtllm", "llama3-70b", "fp8", False),  # TensorRT-LLM's FP8 needs Ada or later
])
def test_ampere_runs_the_weight_only_formats_the_engines_have_kernels_for(engine, model, weights, runs):
    from autotune.serving.space import REASONS, rejection_reasons

    hw = load_hardware("a100-sxm4-80gb")
    spec = load_model(model)
    plan = parse_serve_plan(f"tp=4,weights={weights},kv=bf16,max_batch=64", 8)
    code = int(rejection_reasons(spec, Cluster(hw, 8, 8), ServePlanBatch.from_plans([plan]), engine=engine)[0])
    assert (code == 0) == runs, REASONS[code]
    if not runs:
        assert REASONS[code] == "weight precision not supported by the GPU"
        result = runner.invoke(app, ["predict", "--workload", "serve", "-m", model, "-H", "a100-sxm4-80gb", "--gpus",
                                     "8", "--input-len", "1000", "--output-len", "200", "-p", f"tp=4,weights={weights}",
                                     "--engine", engine])
        assert result.exit_code == 1 and "cannot run: weight precision not supported" in result.stdout, result.output


def test_a_dense_model_has_no_mxfp4_checkpoint():
    """MXFP4 checkpoints quantize MoE experts (gpt-oss) and the engines' MXFP4 nothing else: a dense model with
    --checkpoint mxfp4 was ranked and emitted as if every layer were 4-bit."""
    from autotune.serving.space import REASONS, rejection_reasons

    args = ["--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "1000",
            "--output-len", "200"]
    for command in (["search", *args], ["predict", *args, "-p", "tp=4"]):
        result = runner.invoke(app, [*command, "--checkpoint", "mxfp4"])
        assert result.exit_code == 2 and "field '--checkpoint'" in result.stderr and "is dense" in result.stderr
    plan = ServePlanBatch.from_plans([parse_serve_plan("tp=4,weights=mxfp4,kv=bf16,max_batch=64", 8)])
    code = rejection_reasons(load_model("llama3-70b"), Cluster(load_hardware("b200"), 8, 8), plan, engine="vllm")[0]
    assert REASONS[int(code)].startswith("mxfp4 weights on a dense model")
    moe = rejection_reasons(load_model("mixtral-8x7b"), Cluster(load_hardware("b200"), 8, 8), plan, engine="vllm")[0]
    assert int(moe) == 0


def test_the_moe_dispatch_sends_a_token_once_per_rank_holding_its_experts():
    """Hand-checked: DeepSeek's top-8 over 16 GPUs.  EP 16: 16 (1 - (15/16)^8) = 6.45 copies of a token (not 8: two
    experts on one rank share a copy); expert TP over all 16 (ep 1): each token to every GPU, 16 copies; EP 256:
    7.89, about k."""
    from autotune.serving.estimate import dispatch_copies

    a = {"topk": 8.0}
    assert float(dispatch_copies(a, 16.0, 16.0)) == pytest.approx(16 * (1 - (15 / 16) ** 8)) == pytest.approx(6.452, abs=1e-3)
    assert float(dispatch_copies(a, 16.0, 1.0)) == 16.0
    assert float(dispatch_copies(a, 256.0, 256.0)) == pytest.approx(7.89, abs=0.01)


def test_an_all_to_all_across_nodes_sends_only_the_remote_copies_over_the_nic():
    """Hand-checked: DeepSeek's top-8 (h 7168), 1000 tokens a GPU, 1.5 bytes an element (fp8 dispatch, bf16
    combine): 10.752 MB per copy of the GPU's tokens; H100 NVLink 450 GB/s and NIC 50 GB/s a GPU, both at a
    link_bandwidth of 0.5, alltoall_us 20.  c16 = 1 - (15/16)^8 = 0.40328 (EP 16: a GPU holds one of the
    token's experts), c8 = 1 - (7/8)^8 = 0.65639 (EP 8).

    * EP 8 in one node: 7 c8 = 4.5947 copies over NVLink, 20 us + 10.752 MB x 4.5947 / 225 GB/s = 239.6 us
      (what the one-tier formula gave).
    * EP 16 over two nodes, prefill (DeepEP normal kernels): one RDMA copy to the other node when it holds any of
      the token's experts, 1 - (1/2)^8 = 0.99609 copies, 428.4 us on the NIC; NVLink carries the node's own
      copies and the ones forwarded from the other node, 2 x 7 c16 = 5.6459 copies, 269.8 us; the two overlap:
      20 + 428.4 = 448.4 us.
    * the same over two nodes, decode (low-latency kernels, one RDMA write per remote GPU): 8 c16 = 3.2262 copies
      on the NIC, 1387.5 us, NVLink's 7 c16 hidden under it: 1407.5 us.
    * every copy priced at the NIC, as before: 20 + 15 c16 x 10.752 MB / 25 GB/s = 2621.6 us, 5.8x prefill's.
    * SGLang's gathering path (ep below tp*dp) stays an all-gather at the slowest link: 16 bf16 copies,
      20 + 15/16 x 16 x 14.336 MB / 25 GB/s = 8621.6 us; on an NVL72 rack 16 GPUs stay one NVLink island:
      20 + 15 c16 x 10.752 MB / 450 GB/s = 164.5 us."""
    from autotune.serving.arch import gpu_scalars
    from autotune.serving.estimate import _moe_alltoall_s, dispatch_copies_by_link

    a = {"topk": 8.0, "h": 7168.0}
    g = gpu_scalars(load_hardware("h100-sxm5-80gb"))
    p = ServingParams(link_bandwidth=0.5, alltoall_us=20.0)

    def us(G, ep, gather=0.0, per_island=True, gpu=g):  # one all-to-all of 1000 tokens a GPU, microseconds
        return float(_moe_alltoall_s(1000.0, a, G, ep, gather, gpu, p, per_island=per_island)) * 1e6

    nvlink, nic = dispatch_copies_by_link(a, 16.0, 16.0, 8.0, per_island=True)
    assert float(nvlink) == pytest.approx(5.6459, abs=1e-4) and float(nic) == pytest.approx(0.99609, abs=1e-5)
    nvlink, nic = dispatch_copies_by_link(a, 16.0, 16.0, 8.0, per_island=False)
    assert float(nvlink) == pytest.approx(2.8230, abs=1e-4) and float(nic) == pytest.approx(3.2262, abs=1e-4)
    assert us(8.0, 8.0) == pytest.approx(239.6, abs=0.05)
    assert us(8.0, 8.0, per_island=False) == pytest.approx(us(8.0, 8.0))  # one node: the two kernels alike
    assert us(16.0, 16.0) == pytest.approx(448.4, abs=0.05)
    assert us(16.0, 16.0, per_island=False) == pytest.approx(1407.5, abs=0.05)
    assert 2621.6 / us(16.0, 16.0) == pytest.approx(5.85, abs=0.01)
    assert us(16.0, 1.0, gather=1.0) == pytest.approx(8621.6, abs=0.05)
    rack = gpu_scalars(load_hardware("gb200-nvl72"))
    assert us(16.0, 16.0, gpu=rack) == pytest.approx(20 + 15 * 0.4032805 * 10.752e6 / 450e9 * 1e6, rel=1e-6)
    assert us(16.0, 16.0, gpu=rack) == pytest.approx(164.5, abs=0.05)
    assert us(16.0, 16.0, gpu=rack, per_island=False) == pytest.approx(us(16.0, 16.0, gpu=rack))


def test_wide_ep_prefill_over_nodes_is_not_priced_at_the_nic_for_every_copy():
    """LMSYS's 96 x H100 DeepSeek deployment (blog, 2025-05-05, large-scale EP) measured about 50k input tokens/s
    per node for EP 32 prefill over 4 nodes with 4K prompts, about what one EP 8 engine per node reaches.  With
    every dispatched copy priced at the NIC the estimate gave EP 32 a third of 4 x EP 8 (18.1k against 52.2k per
    node); with the node-local copies on NVLink and one RDMA copy per remote node it gives over half (30.5k: the
    rest is SGLang's chunk split over 32 ranks and comm not overlapped with compute, which the plan does not ask
    for)."""
    hw, model = load_hardware("h100-sxm5-80gb"), load_model("deepseek-v3")
    decode = "decode_workers=1,decode_dp=64,decode_ep=64,weights=fp8,kv=fp8,max_batch=8192"
    plans = ServePlanBatch.from_plans([parse_serve_plan(f"prefill_workers={32 // dp},prefill_dp={dp},prefill_ep={dp},"
                                                        f"{decode}", 96) for dp in (32, 8)])
    est = estimate_serving(model, Cluster(hw, 96, 8), ServeWorkload(4096, 100), plans, CURRENT["sglang"],
                           engine="sglang")
    per_node = est.requests_per_s * 4096 / 4  # the prefill pool is 4 nodes either way
    assert per_node[1] == pytest.approx(52.2e3, rel=0.01)  # one node per engine: NVLink only, unchanged
    assert 0.55 < per_node[0] / per_node[1] < 1.0
    assert per_node[0] == pytest.approx(30.5e3, rel=0.02)


def test_expert_parallelism_changes_the_estimate_of_attention_dp():
    """Attention DP 16 with the experts split 16 ways (ep 1) gathers every token to every GPU; with EP 16 it sends
    a token to the ranks of its experts: the same plans were estimated alike and ranked by memory alone."""
    hw, model = load_hardware("h200-sxm-141gb"), load_model("deepseek-v3")
    plans = ServePlanBatch.from_plans([parse_serve_plan(f"tp=1,dp=16,ep={ep},weights=fp8,kv=fp8,max_batch=2048", 16)
                                       for ep in (1, 16)])
    est = estimate_serving(model, Cluster(hw, 16, 8), ServeWorkload(2000, 500, concurrency=1024), plans,
                           CURRENT["sglang"], engine="sglang")
    assert est.tpot_ms[1] < est.tpot_ms[0] and est.output_tokens_per_s[1] > est.output_tokens_per_s[0]


def test_the_decode_dispatch_is_priced_with_the_kernels_the_launch_files_choose():
    """vLLM's aggregated engine runs DeepEP's high-throughput kernels (--all2all-backend deepep_high_throughput) and
    SGLang's decode batches above 1,024 a rank its normal ones; the decode estimate had priced the low-latency
    kernels (one RDMA copy per remote GPU) for every engine."""
    import numpy as np

    from autotune.serving.engines import DEEPEP_LL_MAX_TOKENS, DEFAULTS

    vllm, sglang, trtllm = DEFAULTS["vllm"], DEFAULTS["sglang"], DEFAULTS["trtllm"]
    assert list(vllm.decode_dispatch_per_island(np.array([False, True]), np.array([64, 64]))) == [1.0, 0.0]
    assert list(sglang.decode_dispatch_per_island(np.array([False, True]),
                                                  np.array([DEEPEP_LL_MAX_TOKENS, DEEPEP_LL_MAX_TOKENS + 1]))) == [0.0, 1.0]
    assert list(trtllm.decode_dispatch_per_island(np.array([False]), np.array([4096]))) == [0.0]
