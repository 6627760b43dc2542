"""Rules an expert review found missing, each run as a user types it (CliRunner): the batch a search calls the fit
is one the engine's budget holds at that batch; a batch limit is a whole number per attention-DP rank; a block-FP8
checkpoint is not split below its 128-wide blocks; emit refuses files that cannot start; one framework per search's
launch files; an expert capacity factor below 1 is refused; EP groups that straddle filled NVL72 racks."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.cli import app
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.serving.plan import ServePlanBatch, parse_serve_plan
from autotune.serving.space import REASONS, rejection_reasons
from tests.test_bad_input import assert_user_error

runner = CliRunner()
L70_2 = ["--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "2", "--input-len", "4096",
         "--output-len", "1024"]


def _json(args: list[str]) -> dict:
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_fit_batch_is_the_largest_the_budget_holds_at_that_batch():
    """The fit was worked out at the layout's smallest batch; activations and CUDA graphs grow with the batch, so the
    plan it made did not fit and the search dropped it (TP2 fp8 ranked at batch 64 where 94 fits, 16% slower)."""
    doc = _json(["search", *L70_2, "--fix", "tp=2", "--fix", "weights=fp8", "--fix", "kv=fp8", "--top", "5"])
    best = doc["plans"][0]
    batch = best["plan"]["max_batch"]
    assert batch == best["estimate"]["max_batch_fit"] > 64, best
    plan = f"tp=2,weights=fp8,kv=fp8,max_batch={batch}"
    assert _json(["predict", *L70_2, "-p", plan])["estimate"]["fits"]
    over = runner.invoke(app, ["predict", *L70_2, "-p", plan.replace(f"={batch}", f"={batch + 1}"), "--json"])
    assert over.exit_code == 1 and json.loads(over.stdout)["estimate"]["fits"] is False, over.output


def test_a_batch_limit_is_a_whole_number_per_attention_dp_rank():
    v3 = ["--workload", "serve", "-m", "deepseek-v3", "-H", "h200-sxm-141gb", "--gpus", "8", "--checkpoint", "fp8",
          "--input-len", "1000", "--output-len", "100"]
    refused = runner.invoke(app, ["predict", *v3, "-p", "dp=8,ep=8,weights=fp8,max_batch=100"])
    assert refused.exit_code == 1 and "(max_batch=100, dp=8); give max_batch=96 or 104" in refused.output
    assert_user_error(runner.invoke(app, ["emit", "dp=8,ep=8,weights=fp8,max_batch=100", "--format", "sglang",
                                          *v3[2:]]), "--plan", "max_batch=96 or 104")
    # the space's limits are taken down to a multiple of the ranks: 128 on 72 ranks is 72
    doc = _json(["search", "--workload", "serve", "-m", "deepseek-v3", "-H", "gb200-nvl72", "--gpus", "72",
                 "--checkpoint", "fp8", "--input-len", "2048", "--output-len", "512", "--fix", "mode=agg",
                 "--fix", "dp=72", "--top", "20"])
    assert doc["plans"] and all(p["plan"]["max_batch"] % 72 == 0 for p in doc["plans"])


def test_a_block_fp8_checkpoint_is_not_split_below_its_blocks():
    """Qwen3-235B-A22B-FP8's 1536-wide experts over 8 GPUs leave 192 each, not a whole number of 128-wide blocks:
    vLLM and SGLang refuse to load it; the same layout from a bf16 checkpoint (online fp8, no blocks) runs."""
    spec = load_model("qwen3-235b-a22b")
    cluster = Cluster(load_hardware("h100-sxm5-80gb"), 8, 8)
    plans = ServePlanBatch.from_plans([parse_serve_plan(p, 8) for p in (
        "tp=8,weights=fp8", "tp=8,ep=8,weights=fp8", "tp=4,weights=fp8", "tp=8,weights=bf16")])
    codes = rejection_reasons(spec, cluster, plans, engine="vllm", checkpoint="fp8")
    assert [REASONS[c] if c else "" for c in codes] == [REASONS[15], "", "", ""]
    assert not rejection_reasons(spec, cluster, plans, engine="vllm", checkpoint="bf16").any()
    q235 = ["--workload", "serve", "-m", "Qwen/Qwen3-235B-A22B-FP8", "-H", "h100-sxm5-80gb", "--gpus", "8",
            "--input-len", "2048", "--output-len", "512"]
    refused = runner.invoke(app, ["predict", *q235, "-p", "tp=8,weights=fp8"])
    assert refused.exit_code == 1 and "expert width 1536/8 GPUs = 192, blocks of 128" in refused.output
    doc = _json(["search", *q235, "--concurrency", "64", "--top", "10"])
    for entry in doc["plans"]:  # no ranked plan reads the checkpoint's fp8 over a split it cannot load
        p = entry["plan"]
        if p["mode"] == "agg" and p["weights"] == "fp8":
            assert (1536 // (p["tp"] * p["dp"] // p["ep"])) % 128 == 0, p
    # per-tensor FP8 (NVIDIA's ModelOpt exports of Llama) has no blocks: any tp loads; an unsplit width loads whole
    llama = load_model("llama3.1-70b")
    tp8 = ServePlanBatch.from_plans([parse_serve_plan("tp=8,weights=fp8", 8)])
    assert not rejection_reasons(llama, cluster, tp8, engine="vllm", checkpoint="fp8").any()
    one = ServePlanBatch.from_plans([parse_serve_plan("tp=1,weights=fp8", 8)])
    assert not rejection_reasons(load_model("qwen3-30b-a3b"), cluster, one, engine="vllm", checkpoint="fp8").any()
    # DeepSeek-V3's 2048-wide experts: 16 ways (128 each) load; 32 ways (64 each) do not
    v3 = load_model("deepseek-v3")
    wide = Cluster(load_hardware("gb200-nvl72"), 32, 4)
    plans = ServePlanBatch.from_plans([parse_serve_plan(p, 32) for p in ("tp=16,dp=2,ep=2,weights=fp8",
                                                                         "tp=32,weights=fp8")])
    assert [int(c) for c in rejection_reasons(v3, wide, plans, engine="vllm", checkpoint="fp8")] == [0, 15]


def test_emit_refuses_a_memory_flag_outside_its_range_and_a_plan_that_cannot_start():
    base = ["-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "2048", "--output-len", "256"]
    # SGLang's reserve for 100,000 sequences is more than the GPU: its fraction came out at -0.223, exit 0
    for flags in ([], ["--allow-no-fit"]):
        assert_user_error(runner.invoke(app, ["emit", "tp=4,weights=fp8,kv=fp8,max_batch=100000", "--format",
                                              "sglang", *base, *flags]), "max_batch", "--mem-fraction-static")
    # a batch limit past what the KV cache holds: the engine starts and admits fewer, so it is written with a warning
    short = runner.invoke(app, ["emit", "tp=4,weights=fp8,kv=fp8,max_batch=4000", "--format", "vllm", *base])
    assert short.exit_code == 0 and "warning:" in short.stderr and "KV-cache budget" in short.stderr, short.output


def test_a_searchs_launch_files_are_of_one_framework(tmp_path):
    """Files of a second framework quoted the first one's estimate (a DeepSpeed plan shown at 60 GiB that needs 85)."""
    args = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "16384", "-b", "256"]
    assert_user_error(runner.invoke(app, [*args, "--emit", "megatron,deepspeed", "--out", str(tmp_path / "a")]),
                      "--emit", "megatron: megatron-lm", "deepspeed: deepspeed", "autotune emit")
    assert not (tmp_path / "a").exists()
    fine = runner.invoke(app, [*args, "--emit", "megatron,slurm", "--out", str(tmp_path / "b"), "--top", "1"])
    assert fine.exit_code == 0, fine.output


def test_an_expert_capacity_factor_below_one_is_refused():
    """At 0.1 the step skipped 90% of the experts' work while tokens/s and MFU counted it (MFU 164%)."""
    args = ["predict", "-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096", "-b", "512",
            "--plan", "ep=8,zero=2,mbs=1,recompute=full"]
    assert_user_error(runner.invoke(app, [*args, "--moe-capacity-factor", "0.5"]), "--moe-capacity-factor", ">= 1")
    ok = runner.invoke(app, [*args, "--moe-capacity-factor", "1.0", "--json"])
    assert ok.exit_code == 0 and json.loads(ok.stdout)["estimate"]["mfu"] < 1.0, ok.output


def test_optimizer_offload_is_planned_only_where_the_framework_offers_it():
    """torchtitan ranked a ZeRO-3 offload plan its emitter refuses; Megatron-LM of 2023 ranked offload plans first,
    two years before Megatron-Core's --optimizer-cpu-offload."""
    from autotune.inputs.framework import load_framework

    assert not load_framework("torchtitan").optimizer_offload and not load_framework("megatron-lm@2023-06").optimizer_offload
    assert load_framework("megatron-lm").optimizer_offload and load_framework("deepspeed").optimizer_offload
    args = ["-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "8192", "-b", "512"]
    for framework in ("torchtitan", "megatron-lm@2023-06"):
        doc = _json(["search", *args, "--framework", framework, "--top", "10"])
        assert doc["plans"] and all(p["plan"]["offload"] == "none" for p in doc["plans"]), framework
    refused = runner.invoke(app, ["predict", *args, "--framework", "nemo@24.07", "--plan", "tp=4,pp=4,zero=1,offload=cpu"])
    assert refused.exit_code == 1 and "does not offer optimizer CPU offload" in refused.output, refused.output


def test_no_plan_fits_leads_with_the_rule_that_binds():
    """The GPU-count rule rejects thousands of plans in any space: the advice led with it, not with the schedule the
    framework lacks."""
    result = runner.invoke(app, ["search", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "8192",
                                 "-b", "512", "--fix", "schedule=dualpipe"])
    assert result.exit_code == 1, result.output
    text = " ".join(result.output.split())
    assert "every plan of the space breaks dualpipe schedule the framework does not offer" in text
    assert "--framework other" in text
    # a rule every plan breaks binds though rules checked before it reject the plans first (offload on torchtitan)
    offload = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096",
                                  "-b", "64", "--framework", "torchtitan", "--fix", "offload=cpu"])
    text = " ".join(offload.output.split())
    assert offload.exit_code == 1 and "breaks optimizer offload the framework does not offer" in text, text
    assert "does not offer optimizer CPU offload: drop --fix offload=cpu" in text


def test_serving_text_says_which_gpu_and_which_flag():
    """predict's memory line of a disaggregated plan headed the decode GPU's parts with the prefill GPU's total; a GPU
    range on predict pointed a serving user at --tokens; no-fit advice offered precisions already searched."""
    serve = ["--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--input-len", "1000", "--output-len",
             "200"]
    plan = "prefill_workers=2,prefill_tp=2,decode_workers=1,decode_tp=4,weights=fp8,kv=fp8,max_batch=64"
    shown = runner.invoke(app, ["predict", *serve, "--gpus", "8", "-p", plan])
    assert shown.exit_code == 0, shown.output
    est = _json(["predict", *serve, "--gpus", "8", "-p", plan])["estimate"]
    text = " ".join(shown.output.split())
    assert (f"(the fuller pool's; prefill GPU {est['prefill_memory_gib_per_gpu']:.1f}, decode GPU "
            f"{est['decode_memory_gib_per_gpu']:.1f}); a decode GPU's parts: weights") in text
    assert_user_error(runner.invoke(app, ["predict", *serve, "--gpus", "8..16", "-p", "tp=4"]), "--gpus",
                      "(serving: --request-rate R)")
    none = runner.invoke(app, ["search", *serve[:2], "-m", "llama3-405b", *serve[4:6], "--gpus", "2",
                               *serve[6:]])
    assert none.exit_code == 1 and "no serving plan fits" in none.output
    assert "lower weight precision" not in none.output and "was searched" in none.output, none.output


def test_a_bundled_name_published_only_quantized_says_so():
    """-m gpt-oss-120b planned bf16 weights (about 1.75x slower than the MXFP4 weights OpenAI publishes) without a
    word; the note names the published checkpoint and the flags that plan it."""
    base = ["predict", "--workload", "serve", "-H", "h100-sxm5-80gb", "--gpus", "4", "--input-len", "1000",
            "--output-len", "200", "-p", "tp=4", "--json"]
    noted = runner.invoke(app, [*base, "-m", "gpt-oss-120b"])
    assert noted.exit_code == 0, noted.output
    note = json.loads(noted.stdout)["checkpoint_note"]
    assert "openai/gpt-oss-120b holds mxfp4" in note and "--checkpoint mxfp4" in note
    for quiet in (["-m", "gpt-oss-120b", "--checkpoint", "bf16"], ["-m", "openai/gpt-oss-120b"], ["-m", "llama3-70b"]):
        result = runner.invoke(app, [*base, *quiet])
        assert result.exit_code == 0 and "checkpoint_note" not in json.loads(result.stdout), (quiet, result.output)


def test_under_a_request_rate_the_faster_reply_ranks_first():
    """Every stable plan serves the rate, so throughputs tie; the tie went to the fewest GPUs per replica, which ranked
    a TTFT of 1,860 ms (target 2,000) above one of 1,072 ms on the same GPUs."""
    doc = _json(["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                 "--request-rate", "20", "--input-len", "1000", "--output-len", "200", "--ttft-ms", "2000",
                 "--tpot-ms", "50", "--top", "8"])
    met = [p["estimate"] for p in doc["plans"] if p["estimate"]["meets_targets"]]
    assert len(met) >= 3 and len({round(e["output_tokens_per_s"], 6) for e in met}) == 1
    replies = [e["ttft_ms"] + 199 * e["tpot_ms"] for e in met]
    assert all(b >= a * 0.99 for a, b in zip(replies, replies[1:])), replies


def test_fixing_the_experts_tp_on_a_dense_model_is_refused():
    """Its rule etp = tp turned --fix etp=1 into a silent tp=1 (a 3% slower winner on Llama-3-70B)."""
    args = ["search", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "-s", "8192", "-b", "512", "--fix", "etp=1"]
    assert_user_error(runner.invoke(app, [*args, "--gpus", "64"]), "--fix", "llama3-70b is dense", "fix tp instead")
    assert_user_error(runner.invoke(app, [*args, "--gpus", "8..64", "--tokens", "1e11"]), "--fix", "is dense")
    moe = runner.invoke(app, ["search", "-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096",
                              "-b", "512", "--fix", "etp=1", "--top", "1"])
    assert moe.exit_code == 0, moe.output


def test_a_bare_slurm_runs_the_framework_searched(tmp_path):
    """--framework deepspeed --emit slurm wrote a Megatron-LM Slurm script quoting DeepSpeed's estimate; slurm:X for
    another framework than --framework is refused, as --emit X is."""
    args = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64", "--top", "1"]
    made = runner.invoke(app, [*args, "--framework", "deepspeed", "--emit", "slurm", "--out", str(tmp_path / "a")])
    assert made.exit_code == 0, made.output
    assert (tmp_path / "a" / "deepspeed_launch.sh").is_file() and not (tmp_path / "a" / "megatron_pretrain_gpt.sh").exists()
    assert_user_error(runner.invoke(app, [*args, "--framework", "deepspeed", "--emit", "slurm:torchtitan", "--out",
                                          str(tmp_path / "b")]), "--emit", "torchtitan launch configs run torchtitan")


def test_a_pinned_batch_limit_is_kept_not_rewritten():
    """--fix max_batch=100 with dp=8 was searched at 96 without a word, where predict refuses 100."""
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "deepseek-v3", "-H", "h200-sxm-141gb",
                                 "--gpus", "8", "--checkpoint", "fp8", "--input-len", "1000", "--output-len", "100",
                                 "--fix", "max_batch=100", "--fix", "dp=8"])
    assert result.exit_code == 1 and "max_batch not a multiple of the decode dp" in result.output, result.output
    kept = _json(["search", "--workload", "serve", "-m", "deepseek-v3", "-H", "h200-sxm-141gb", "--gpus", "8",
                  "--checkpoint", "fp8", "--input-len", "1000", "--output-len", "100", "--fix", "max_batch=96",
                  "--fix", "dp=8"])
    assert kept["plans"] and all(p["plan"]["max_batch"] == 96 for p in kept["plans"])
