"""Serving review, round 7: what a practitioner's search, emit and report runs found."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parents[1]


def _search_json(*args: str) -> dict:
    result = runner.invoke(app, ["search", "--workload", "serve", *args, "--json"])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)


def test_concurrency_search_offers_the_engines_share_of_the_users_as_the_batch_limit():
    # 100 users on one DP8 engine: no listed limit is a multiple of 8 at or above 100, and the KV-bound fit (16k
    # sequences) made SGLang reserve CUDA-graph memory for 2,076 a rank; the engine's share, 104, serves the same
    # load with the smaller reserve
    doc = _search_json("-m", "qwen3-30b-a3b", "-H", "h200-sxm-141gb", "--gpus", "8", "--input-len", "1024",
                       "--output-len", "256", "--concurrency", "100", "--engine", "sglang", "--fix", "mode=agg",
                       "--fix", "dp=8", "--fix", "tp=1", "--top", "3")
    best = doc["plans"][0]
    assert best["plan"]["max_batch"] == 104
    assert best["estimate"]["max_batch_fit"] > 104
    fit = runner.invoke(app, ["predict", "--workload", "serve", "-m", "qwen3-30b-a3b", "-H", "h200-sxm-141gb",
                              "--gpus", "8", "--input-len", "1024", "--output-len", "256", "--concurrency", "100",
                              "--engine", "sglang", "-p", ",".join(f"{k}={v}" for k, v in best["plan"].items()
                                                                   if k not in ("max_batch", "replicas"))
                              + f",max_batch={best['estimate']['max_batch_fit'] // 8 * 8}", "--json"])
    fitted = json.loads(fit.stdout)["estimate"]
    assert fitted["output_tokens_per_s"] == best["estimate"]["output_tokens_per_s"]
    assert best["estimate"]["memory_gib_per_gpu"] < fitted["memory_gib_per_gpu"]


def test_report_of_a_search_without_targets_gives_no_verdict(tmp_path):
    out = tmp_path / "s"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3.1-8b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "2", "--input-len", "1024", "--output-len", "128", "--top", "3",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "rep")])
    assert result.exit_code == 0, result.output
    page = (tmp_path / "rep" / "report.html").read_text()
    assert "meet the targets" not in page and "no latency target set" in page
    assert "<td>meets</td>" not in page


def _sglang_fraction(plan: str, model: str = "llama3.1-70b", gpus: str = "16") -> float:
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", model, "-H", "h100-sxm5-80gb", "--gpus", gpus,
                                 "-p", plan, "--engine", "sglang", "--input-len", "2048", "--output-len", "256",
                                 "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["estimate"]["engine_memory_flag"]["--mem-fraction-static"]


def test_sglang_default_reserve_of_a_dense_dp_engine_is_that_of_its_tp_ranks():
    # a dense model's --dp-size runs separate schedulers of --tp-size 4: SGLang reserves 512 MiB + 1.5 MiB x 8,192
    # chunk tokens + 4/8 GiB + 2 MiB x 64 graph batches + 8 MiB x 58 prefill graphs = 13,904 MiB of the 79.1 GiB CUDA
    # reports (1 - 13,904 / 80,998 = 0.8283), with no attention-DP term
    dense_dp = _sglang_fraction("tp=4,dp=2,weights=fp8,kv=fp8,max_batch=128")
    assert dense_dp == _sglang_fraction("tp=4,weights=fp8,kv=fp8,max_batch=64") == 0.828
    # a MoE engine's dp is attention DP: --tp-size tp*dp and the 3 MiB per graph batch and rank term stay
    assert _sglang_fraction("tp=1,dp=8,ep=8,kv=fp8,max_batch=128", model="qwen3-30b-a3b", gpus="8") < dense_dp


@pytest.mark.parametrize("engine, said", [
    ("vllm", "within the vllm budget of"),
    ("sglang", "of the GPU's 79.1 GiB (--mem-fraction-static"),
    ("trtllm", "of the GPU's 79.1 GiB (kv_cache_config.free_gpu_memory_fraction 0.9 sizes the KV cache)"),
])
def test_the_best_line_says_what_the_engines_memory_flag_governs(engine, said):
    """SGLang's flag sizes weights and KV cache and TensorRT-LLM's the KV cache, both inside the whole GPU; only vLLM's
    caps the process, so only vLLM has a budget below the GPU's memory.  'within the sglang budget of 80.0 GiB
    (--mem-fraction-static 0.834)' read as if the flag gave 80 GiB."""
    result = runner.invoke(app, ["search", "-m", "llama3.1-8b", "-H", "h100-sxm5-80gb", "--gpus", "1", "--workload",
                                 "serve", "--engine", engine, "--input-len", "1024", "--output-len", "128", "--top", "1"])
    assert result.exit_code == 0, result.output
    best = next(line for line in result.stdout.splitlines() if line.startswith("Best:"))
    assert said in " ".join(result.stdout.split()), best


def test_a_serving_plan_string_is_emitted_at_the_load_and_targets_given(tmp_path):
    """emit of a plan string quoted its figures at maximum throughput only (TTFT of tens of seconds, every request
    queued), whatever load the user plans for: --concurrency / --request-rate and --ttft-ms / --tpot-ms now set the
    load and targets the header quotes, as predict reads them; a plans.json keeps its search's."""
    base = ["emit", "tp=8,weights=fp8,kv=fp8,max_batch=64", "-f", "vllm", "-m", "llama3.1-70b", "-H",
            "h100-sxm5-80gb", "--gpus", "8", "--input-len", "2048", "--output-len", "256"]
    full = runner.invoke(app, base)
    users = runner.invoke(app, [*base, "--concurrency", "16", "--tpot-ms", "10"])
    assert full.exit_code == 0 and users.exit_code == 0, (full.output, users.output)
    assert "# predicted at maximum throughput (all requests queued):" in full.stdout
    assert "# predicted at 16 concurrent users:" in users.stdout
    assert "MISSES the targets (TPOT" in users.stdout and "misses the targets on vllm" in users.stderr
    predicted = runner.invoke(app, ["predict", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                                    "--workload", "serve", "-p", "tp=8,weights=fp8,kv=fp8,max_batch=64",
                                    "--input-len", "2048", "--output-len", "256", "--concurrency", "16", "--json"])
    ttft = json.loads(predicted.stdout)["estimate"]["ttft_ms"]
    assert f"TTFT {ttft:,.0f} ms" in users.stdout
    rate = runner.invoke(app, [*base, "--request-rate", "2"])
    assert rate.exit_code == 0 and "# predicted at 2 requests/s:" in rate.stdout
    both = runner.invoke(app, [*base, "--request-rate", "2", "--concurrency", "4"])
    assert both.exit_code == 2 and "give the load once" in both.stderr
    training = runner.invoke(app, ["emit", "tp=8", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                                   "-s", "4096", "-b", "8", "--concurrency", "4"])
    assert training.exit_code == 2 and "field '--concurrency'" in training.stderr
    out = tmp_path / "s"
    searched = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3.1-8b", "-H", "h100-sxm5-80gb",
                                   "--gpus", "1", "--input-len", "128", "--output-len", "16", "--top", "1",
                                   "--out", str(out)])
    assert searched.exit_code == 0, searched.output
    kept = runner.invoke(app, ["emit", str(out), "-f", "vllm", "--concurrency", "4"])
    assert kept.exit_code == 2 and "comes from" in kept.stderr and "field '--concurrency'" in kept.stderr


def test_vllm_on_an_a100_takes_its_small_defaults():
    """vLLM 0.33 keeps an A100 80GB on its small serving defaults (2,048 batched tokens, 256 sequences) whatever its
    memory (EngineArgs.get_batch_defaults: '"a100" not in device_name'); other GPUs of 70 GiB or more take 8,192 and
    1,024, and 160 GiB or more 16,384."""
    from autotune.serving.engines import DEFAULTS

    vllm = DEFAULTS["vllm"]
    assert (vllm.chunk_tokens(80.0, "a100-sxm4-80gb"), vllm.max_batch(80.0, "a100-sxm4-80gb")) == (2048.0, 256)
    assert (vllm.chunk_tokens(80.0, "h100-sxm5-80gb"), vllm.max_batch(80.0, "h100-sxm5-80gb")) == (8192.0, 1024)
    assert (vllm.chunk_tokens(180.0, "b200-sxm-180gb"), vllm.max_batch(180.0, "b200-sxm-180gb")) == (16384.0, 1024)
    assert DEFAULTS["sglang"].chunk_tokens(80.0, "a100-sxm4-80gb") == 8192.0  # SGLang's rule is by memory only
    result = runner.invoke(app, ["emit", "tp=1", "-f", "vllm", "-m", "llama3.1-8b", "-H", "a100-sxm4-80gb", "--gpus",
                                 "1", "--input-len", "1000", "--output-len", "100"])
    assert result.exit_code == 0, result.output
    assert "--max-num-seqs 256" in result.stdout and "--max-num-batched-tokens 2048" in result.stdout


def test_sglang_reserve_follows_its_memory_hook_for_each_kind_of_server():
    """Hand-checked against SGLang 0.5.23's arg_groups/memory_hook.py, for DeepSeek-V3 (MLA) at DP8 EP8 with DeepEP on
    a 180 GiB GPU, 64 sequences a rank, a 16,384-token prefill budget (MiB): 512 + 1.5 x 16,384 + 1,024 (8 GPUs of
    --tp-size) + 2 x 64 and 3 x 64 x 8 (decode graphs, attention DP) + 1,536 (MLA prefill graphs) + 1,024 (the
    prefill graphs' DeepEP bridge) = 30,336, then 2,048 for DeepEP's buffers = 32,384.  A prefill server captures no
    decode graphs and has no DeepEP decode buffers (28,672); a decode server runs no prefill chunk (its graphs'
    2,048-token floor: 512 + 3,072 + 1,024 + 128 + 1,536 = 6,272, raised to the 10 GiB floor, + 2,048) and no
    prefill graphs.  Without MLA the prefill graphs are 8 MiB per captured token count: with DeepEP the 38 counts
    SGLang fixed before its memory hook (those up to 2,048, rounded up to multiples of 8: 4..32 in fours give 8, 16,
    24, 32; 14 + 8 + 8 + 4 more up to 2,048)."""
    from autotune.serving.engines import GIB, MIB, ROLE_AGG, ROLE_DECODE, ROLE_PREFILL, sglang_reserved_bytes

    def mib(role, ep=8.0, mla=True):
        return float(sglang_reserved_bytes(16384.0, 1.0, 1.0, 8.0, 64.0, 180 * GIB, moe=True, ep=ep, mla=mla,
                                           role=role)) / MIB

    assert mib(ROLE_AGG) == 32384.0
    assert mib(ROLE_PREFILL) == 28672.0
    assert mib(ROLE_DECODE) == 10240.0 + 2048.0
    assert mib(ROLE_AGG, ep=4.0) == 29312.0  # ep below tp*dp: SGLang's default all-to-all, no DeepEP buffers
    assert mib(ROLE_AGG, mla=False) == 32384.0 - 1536.0 + 38 * 8.0
    # pipeline stages leave SGLang's prefill graphs off (opt-in), and their reserve with them
    assert float(sglang_reserved_bytes(8192.0, 8.0, 2.0, 1.0, 64.0, 80 * GIB, moe=False, role=ROLE_AGG)) / MIB == \
        512.0 + 8192 * 1.5 + 2048.0 + 128.0


def test_sglang_attention_dp_servers_capture_graphs_for_the_batch_a_rank_runs():
    """Under attention DP SGLang caps its decode graphs (512 sequences a rank on a B200) by the whole server's
    --max-running-requests, so a rank running 64 would capture graphs, and reserve memory, for 512: the launch file
    pins them at 64 with --cuda-graph-max-bs-decode, as the estimate counts them; not past the default, not for a
    prefill server."""
    def emitted(plan, gpus=8):
        result = runner.invoke(app, ["emit", plan, "-f", "sglang", "-m", "deepseek-v3", "-H", "b200-sxm-180gb",
                                     "--gpus", str(gpus), "--input-len", "1024", "--output-len", "256",
                                     "--checkpoint", "fp8"])
        assert result.exit_code == 0, result.output
        return result.stdout

    assert "--cuda-graph-max-bs-decode 64" in emitted("tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=512")
    assert "--cuda-graph-max-bs-decode" not in emitted("tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=4096")
    assert "--cuda-graph-max-bs-decode" not in emitted("tp=8,ep=8,weights=fp8,kv=fp8,max_batch=64")
    disagg = emitted("prefill_tp=1,prefill_dp=8,prefill_ep=8,decode_tp=1,decode_dp=8,decode_ep=8,weights=fp8,"
                     "kv=fp8,max_batch=256", gpus=16)
    assert disagg.count("--cuda-graph-max-bs-decode 32") == 1  # the decode server's, not the prefill server's


@pytest.mark.parametrize("engine, said", [
    ("vllm", "per GPU within the vllm budget of"),
    ("sglang", "per GPU of the GPU's 79.1 GiB (--mem-fraction-static"),
    ("trtllm", "per GPU of the GPU's 79.1 GiB (kv_cache_config.free_gpu_memory_fraction 0.9 sizes the KV cache)"),
])
def test_predict_says_what_the_engines_memory_flag_governs_as_search_does(engine, said):
    """predict's memory sentence read 'of the engine's 80.0 (--mem-fraction-static 0.825)', the misreading the
    search's best line no longer makes: both now say it one way."""
    result = runner.invoke(app, ["predict", "-m", "llama3.1-8b", "-H", "h100-sxm5-80gb", "--gpus", "1", "--workload",
                                 "serve", "--engine", engine, "-p", "tp=1", "--input-len", "1024", "--output-len", "128"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.stdout.split())
    assert said in text and "of the engine's" not in text, text


def test_a_plan_string_that_misses_its_targets_is_not_called_the_closest_plan_found(tmp_path):
    """With --ttft-ms on a plan string the launch file said the plan 'is the closest plan found, not one that meets
    them', though no search had looked for one: that clause is a search's plan's only."""
    given = runner.invoke(app, ["emit", "tp=4", "-f", "vllm", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus",
                                "4", "--input-len", "2000", "--output-len", "500", "--concurrency", "16",
                                "--ttft-ms", "50"])
    assert given.exit_code == 0, given.output
    assert "MISSES the targets (TTFT" in given.stdout and "closest plan found" not in given.stdout
    out = tmp_path / "s"
    searched = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3.1-8b", "-H", "h100-sxm5-80gb",
                                   "--gpus", "1", "--input-len", "1024", "--output-len", "128", "--ttft-ms", "1",
                                   "--top", "1", "--out", str(out)])
    assert searched.exit_code == 1, searched.output  # nothing meets a TTFT of 1 ms
    emitted = runner.invoke(app, ["emit", str(out), "-f", "vllm"])
    assert emitted.exit_code == 0, emitted.output
    assert "MISSES the targets" in emitted.stdout and "closest plan found" in emitted.stdout


def test_sglang_divides_the_prefill_budget_among_attention_dp_ranks_only():
    """SGLang divides --chunked-prefill-size by the attention-DP width; a dense engine's --dp-size ranks are schedulers
    of their own, each with the whole budget (8,192 tokens on an 80 GiB GPU)."""
    from autotune.serving.engines import DEFAULTS

    sglang = DEFAULTS["sglang"]
    assert float(sglang.prefill_chunk(80.0, 2.0, "h100-sxm5-80gb", moe=True)) == 4096.0
    assert float(sglang.prefill_chunk(80.0, 2.0, "h100-sxm5-80gb", moe=False)) == 8192.0
    assert float(DEFAULTS["vllm"].prefill_chunk(80.0, 2.0, "h100-sxm5-80gb", moe=True)) == 8192.0


def test_search_writes_no_launch_file_for_another_engine_the_best_plan_cannot_start_on(tmp_path):
    """Ranked for vLLM, Llama-3.1-70B fp8 on one GPU of 77 GiB fits vLLM's budget but not SGLang's (its 10 GiB reserve
    leaves no room for a sequence's KV cache): `search --emit sglang` wrote a script marked WARNING that would not start,
    while `emit --format sglang` refused the same plan.  Now it writes none and says how to get one."""
    text = (ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    profile = tmp_path / "gpu77.yaml"
    profile.write_text(text.replace("name: h100-sxm5-80gb", "name: gpu77").replace("memory_gib: 79.1", "memory_gib: 77"))
    out = tmp_path / "s"
    result = runner.invoke(app, ["search", "-m", "llama3.1-70b", "--checkpoint", "fp8", "-H", str(profile), "--gpus",
                                 "1", "--workload", "serve", "--engine", "vllm", "--input-len", "512", "--output-len",
                                 "64", "--fix", "weights=fp8", "--emit", "sglang", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "cannot run on sglang" in " ".join(result.stderr.split()) and "--allow-no-fit" in result.stderr
    assert not (out / "serve_sglang.sh").exists() and (out / "plans.json").exists()
    refused = runner.invoke(app, ["emit", str(out), "-f", "sglang"])
    assert refused.exit_code == 2 and "does not fit" in refused.stderr
