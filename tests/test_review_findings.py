"""Defects expert-user reviews found, each run as a user types it (CliRunner)."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error

runner = CliRunner()
L70_8 = ["--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "2000",
         "--output-len", "500"]


def test_a_memory_flag_no_value_satisfies_is_not_printed_as_a_value():
    """At a batch limit whose buffers alone pass the GPU's memory, SGLang's reserve leaves a negative
    --mem-fraction-static: predict printed it as the flag's value."""
    result = runner.invoke(app, ["predict", *L70_8, "--engine", "sglang", "-p", "tp=8,max_batch=100000"])
    assert result.exit_code == 1, result.output
    assert "--mem-fraction-static -" not in result.output
    assert "no --mem-fraction-static leaves room: it would be -0." in result.output
    fits = runner.invoke(app, ["predict", *L70_8, "--engine", "sglang", "-p", "tp=8,max_batch=64"])
    assert fits.exit_code == 0 and "(--mem-fraction-static 0." in fits.output, fits.output


def _fp8_config(tmp_path, block):
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).parents[1] / "autotune/data/hf_configs/Qwen--Qwen3-235B-A22B-FP8.json")
                        .read_text())
    quant = config["quantization_config"]
    quant.pop("weight_block_size")
    if block is not None:
        quant["weight_block_size"] = block
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return str(path)


def test_a_users_own_block_fp8_config_is_not_split_below_its_blocks(tmp_path):
    """The block rule read only the catalogue, by bundled name: the same Qwen3-235B-A22B-FP8 config.json given as a
    file was planned at TP8, 192-wide expert slices of 128-wide blocks, which vLLM and SGLang refuse to load."""
    args = ["--workload", "serve", "-H", "h200-sxm-141gb", "--gpus", "8", "--input-len", "2000", "--output-len", "500"]
    plan = ["-p", "tp=8,weights=fp8,kv=fp8,max_batch=64"]
    blocked = runner.invoke(app, ["predict", *args, "-m", _fp8_config(tmp_path, [128, 128]), *plan])
    assert blocked.exit_code != 0 and "expert width 1536/8 GPUs = 192, blocks of 128" in blocked.output, blocked.output
    ep = runner.invoke(app, ["predict", *args, "-m", _fp8_config(tmp_path, [128, 128]), "-p",
                             "tp=8,ep=8,weights=fp8,kv=fp8,max_batch=64"])
    assert ep.exit_code == 0, ep.output  # whole experts per GPU: nothing split
    per_tensor = runner.invoke(app, ["predict", *args, "-m", _fp8_config(tmp_path, None), *plan])
    assert per_tensor.exit_code == 0, per_tensor.output  # no blocks stated: per-tensor scales split anywhere
    bad = runner.invoke(app, ["predict", *args, "-m", _fp8_config(tmp_path, [128, "x"]), *plan])
    assert bad.exit_code == 2 and "quantization_config.weight_block_size" in bad.output, bad.output
    assert "Traceback" not in bad.output


def test_a_shared_expert_split_below_its_blocks_is_named():
    """DeepSeek-V3's shared expert (2048 wide) over tp 32 leaves 64-wide slices of its 128-wide blocks. Its dense
    layers are taken out, so only the shared expert's width can misfit."""
    import dataclasses

    import numpy as np

    from autotune.inputs.modelspec import load_model
    from autotune.serving.plan import parse_serve_plan
    from autotune.serving.space import _fp8_block_misfit, reason_text

    full = load_model("deepseek-v3")
    model = dataclasses.replace(full, moe=dataclasses.replace(full.moe, first_dense_layers=0))
    one = np.array([1])
    assert model.n_dense_layers == 0 and model.moe.shared_expert_ffn_hidden_size == 2048
    assert not _fp8_block_misfit(model, 16 * one, one, 16 * one, 128)[0]
    assert _fp8_block_misfit(model, 32 * one, one, 32 * one, 128)[0]
    text = reason_text(15, parse_serve_plan("tp=32,ep=32,weights=fp8,kv=fp8,max_batch=64", 32), model)
    assert "shared-expert width 2048/tp 32 = 64" in text, text


TRAIN_70B = ["-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-b", "512"]


def test_sequence_parallelism_needs_the_sequence_to_split_evenly_over_tp():
    """8196 tokens on TP8 with sequence parallelism: Megatron-Core asserts the even split at the first forward; the
    search ranked it first and predict accepted 8191."""
    refused = runner.invoke(app, ["predict", *TRAIN_70B, "-s", "8191", "--plan", "tp=8"])
    assert refused.exit_code != 0, refused.output
    assert "sequence not divisible by cp*tp under sequence parallelism (seq_len=8191, cp*tp=1*8=8)" in refused.output
    assert "invalid plan" not in runner.invoke(app, ["predict", *TRAIN_70B, "-s", "8192", "--plan", "tp=8"]).output
    import json

    found = runner.invoke(app, ["search", *TRAIN_70B, "-s", "8196", "--top", "3", "--json"])
    assert found.exit_code == 0, found.output
    for plan in json.loads(found.stdout)["plans"]:
        layout = plan["plan"]
        assert not layout["sp"] or 8196 % (layout["cp"] * layout["tp"]) == 0, layout


def test_a_checkpoint_that_contradicts_the_model_id_is_said_and_not_loaded_from_the_id(tmp_path):
    """Qwen/Qwen3-235B-A22B-FP8 with --checkpoint awq: the script loaded the id's FP8 weights (about 27 GiB per GPU)
    under a header quoting 15.5 GiB of int4, without a word."""
    args = ["tp=8,ep=8,max_batch=64", "-f", "vllm", "-m", "Qwen/Qwen3-235B-A22B-FP8", "-H", "h100-sxm5-80gb", "--gpus",
            "8", "--input-len", "1024", "--output-len", "1024"]
    other = runner.invoke(app, ["emit", *args, "--checkpoint", "awq", "--out", str(tmp_path / "awq")])
    assert other.exit_code == 0, other.output
    assert "holds fp8 weights, but --checkpoint awq names int4 weights" in other.output
    script = (tmp_path / "awq" / "serve_vllm.sh").read_text()
    assert "MODEL=Qwen/Qwen3-235B-A22B-FP8" not in script and 'if [[ -z "${MODEL:-}" ]]; then echo' in script
    same = runner.invoke(app, ["emit", *args, "--checkpoint", "fp8", "--out", str(tmp_path / "fp8")])
    assert same.exit_code == 0 and "weights, but --checkpoint" not in same.output, same.output
    assert "MODEL=Qwen/Qwen3-235B-A22B-FP8" in (tmp_path / "fp8" / "serve_vllm.sh").read_text()
    mine = runner.invoke(app, ["emit", *args, "--checkpoint", "awq", "--model-path", "me/qwen3-awq", "--out",
                               str(tmp_path / "mine")])
    assert mine.exit_code == 0 and "MODEL=me/qwen3-awq" in (tmp_path / "mine" / "serve_vllm.sh").read_text()
    # a bundled name names an architecture, not weights: nothing to contradict
    bundled = runner.invoke(app, ["predict", "--workload", "serve", "-m", "qwen3-235b-a22b", "-H", "h100-sxm5-80gb",
                                  "--gpus", "8", "--input-len", "1024", "--output-len", "1024", "--checkpoint", "awq",
                                  "-p", "tp=8,ep=8,max_batch=64"])
    assert "weights, but --checkpoint" not in bundled.output, bundled.output


def test_a_rate_at_capacity_is_not_said_to_exceed_a_larger_capacity():
    """"rate 16.35/s exceeds capacity 16.4/s": the capacity (16.357/s, the engine full) was rounded past the rate."""
    import json

    def misses(rate):
        result = runner.invoke(app, ["predict", *L70_8[:8], "--input-len", "2048", "--output-len", "256", "-p",
                                     "tp=4,weights=fp8,kv=fp8,max_batch=128", "--request-rate", str(rate), "--json"])
        return json.loads(result.stdout)["estimate"].get("misses", "")

    assert misses(16.35).startswith("rate 16.35/s is at capacity (the engine full serves 16.36/s)")
    over = misses(16.5)
    capacity = float(over.split("exceeds capacity ")[1].split("/s")[0])
    assert capacity < 16.5


def test_the_bare_engine_and_its_newest_release_are_labelled_alike():
    """--engine vllm said "parameters of vLLM 0.33" where vllm@0.33, the same numbers, said the fit comes from
    releases 0.11-0.18 that stand in for it."""
    def note(engine):
        result = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb",
                                     "--gpus", "1", "--input-len", "512", "--output-len", "128", "-p", "tp=1",
                                     "--engine", engine, "--json"])
        return json.loads(result.stdout)["parameters"]

    import json

    assert note("vllm") == note("vllm@0.33")
    assert "(vLLM 0.11-0.18), which stand in for it" in note("vllm")


def test_the_megatron_file_says_what_attention_it_does_not_build(tmp_path):
    """gpt-oss's sliding windows and sinks, GLM-5's sparse attention: the file built dense attention under a header
    quoting the estimate of the sparse network, without a word; Qwen3.5's Gated DeltaNet layers, which no flag builds,
    made a file that trains 60 full-attention layers."""
    from autotune.inputs.modelspec import load_model
    from autotune.outputs.emit import megatron

    oss = " ".join(megatron.model_notes(load_model("gpt-oss-120b")))
    assert "18 of its 36 layers attend to a 128-token window" in oss and "attention sinks" in oss
    assert "sparse attention (an indexer keeps 2048 keys per query)" in " ".join(
        megatron.model_notes(load_model("glm-5")))
    assert not any("window" in n for n in megatron.model_notes(load_model("llama3-70b")))
    refused = runner.invoke(app, ["emit", "tp=2,pp=4,ep=32,etp=1,recompute=full,zero=1", "-m", "qwen3.5-397b-a17b",
                                  "-H", "h100-sxm5-80gb", "--gpus", "1024", "-s", "4096", "-b", "2048", "--format",
                                  "megatron", "--out", str(tmp_path / "q")])
    assert refused.exit_code == 2 and "45 Gated DeltaNet layers" in refused.output, refused.output
    assert not (tmp_path / "q").exists()


def test_a_benchmark_command_with_a_shell_operator_needs_shell():
    """'python3 bench.py | cat' without --shell ran bench.py with '|' and 'cat' as its arguments, quietly."""
    import pytest

    from autotune.errors import InputError
    from autotune.search.tune import parse_command

    for command in ("python3 bench.py | cat", "python3 bench.py > out.log", "python3 a.py && python3 b.py",
                    "python3 bench.py 2>&1"):
        with pytest.raises(InputError, match="--shell"):
            parse_command(command, shell=False)
        assert parse_command(command, shell=True) == command
    assert parse_command("python3 bench.py --tag 'a|b'", shell=False)[-1] == "a|b"  # an argument holding one


def test_a_benchmark_result_with_a_key_twice_fails_the_trial(tmp_path):
    """{"tokens_per_s_per_gpu": 1000, ..., "tokens_per_s_per_gpu": 5}: the last value won, a 194,268% error."""
    import sys

    from autotune.search.tune import run_benchmark

    script = tmp_path / "bench.py"
    script.write_text('print(\'{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": 50, "tokens_per_s_per_gpu": 5}\')\n')
    measured = run_benchmark([sys.executable, str(script)], {"tp": 1}, timeout_s=30)
    assert measured.status == "failed" and "'tokens_per_s_per_gpu' twice" in measured.reason, measured


def test_explain_says_which_recorded_inputs_a_flag_replaced(tmp_path):
    """explain PLANS -s 8192 turned the file's plan, which fits, into 108.7 of 80 GiB under an unchanged header."""
    out = tmp_path / "pj"
    assert runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b",
                               "64", "--out", str(out)]).exit_code == 0
    result = runner.invoke(app, ["explain", str(out), "-s", "8192"])
    assert "explained under --seq-len 8192 (searched: 4096), which its search did not rank" in result.output
    assert "sequence 8192, global batch 64" in result.output
    same = runner.invoke(app, ["explain", str(out)])
    assert same.exit_code == 0 and "did not rank" not in same.output and "sequence 4096" in same.output


SMALL_8B = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64"]


def test_flags_with_nothing_to_act_on_are_said():
    """--trials and --seed on an exact search, --force without --out, exited 0 without a word; --gpus-per-node
    1,000,000 passed where a profile's is refused past 100,000."""
    exact = runner.invoke(app, ["search", *SMALL_8B, "--trials", "5", "--seed", "3"])
    assert exact.exit_code == 0 and "--trials 5 and --seed 3 have no effect: the search was exact" in exact.output
    plain = runner.invoke(app, ["search", *SMALL_8B])
    assert "no effect" not in plain.output
    assert_user_error(runner.invoke(app, ["search", *SMALL_8B, "--force"]), "--force", "--out DIR")
    assert_user_error(runner.invoke(app, ["search", *SMALL_8B, "--gpus-per-node", "1000000"]), "--gpus-per-node",
                      "<= 65,536")


def test_a_config_size_no_model_has_zero_of_states_its_real_bound(tmp_path):
    """num_hidden_layers -1 said "must be >= 0", and 0 then "must be >= 1"."""
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).parents[1] / "autotune/data/hf_configs/Qwen--Qwen3-235B-A22B-FP8.json")
                        .read_text())
    for key in ("num_hidden_layers", "vocab_size"):
        for value in (-1, 0):
            path = tmp_path / f"{key}{value}.json"
            path.write_text(json.dumps({**config, key: value}))
            assert_user_error(runner.invoke(app, ["models", "show", str(path)]), key, f"must be >= 1, but got {value}")


def test_a_training_row_whose_head_size_is_not_whole_is_refused(tmp_path):
    """A CSV row with hidden_size 7168 over 57 heads and no head_dim was predicted (and fitted) with heads of 125,
    where the same shape as a spec file is refused."""
    import csv
    from pathlib import Path

    source = Path(__file__).parents[1] / "examples/data/my_runs.csv"
    rows = list(csv.reader(source.open()))
    header, row = rows[0], rows[1]
    row[header.index("n_heads")] = row[header.index("n_kv_heads")] = "57"
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as handle:
        csv.writer(handle).writerows([header, row])
    assert_user_error(runner.invoke(app, ["validate", str(path)]), "head_dim", "hidden_size/n_heads is not whole")


def test_wide_expert_parallel_scripts_dispatch_with_the_backend_the_estimate_prices(tmp_path):
    """The estimate prices DeepEP's dispatch (a token sent once to each rank holding its experts); the scripts left
    the engines' default, which gathers every token to every rank in bf16."""
    base = ["-m", "deepseek-v3", "-H", "h200-sxm-141gb", "--checkpoint", "fp8", "--input-len", "1024",
            "--output-len", "1024"]

    def script(engine, plan, gpus, name):
        out = tmp_path / name
        result = runner.invoke(app, ["emit", plan, "-f", engine, *base, "--gpus", str(gpus), "--out", str(out)])
        assert result.exit_code == 0, result.output
        return (out / f"serve_{engine}.sh").read_text()

    dep8 = "tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=1024"
    assert "--all2all-backend deepep_high_throughput" in script("vllm", dep8, 8, "v")
    sglang = script("sglang", dep8, 8, "s")
    assert "--moe-a2a-backend deepep" in sglang and "--deepep-mode auto" in sglang
    disagg = ("prefill_workers=1,prefill_dp=8,prefill_ep=8,decode_workers=1,decode_dp=8,decode_ep=8,weights=fp8,"
              "kv=fp8,max_batch=1024")
    split = script("sglang", disagg, 16, "d")
    assert "--deepep-mode normal" in split and "--deepep-mode low_latency" in split
    vsplit = script("vllm", disagg, 16, "vd")
    assert "deepep_high_throughput" in vsplit and "deepep_low_latency" in vsplit
    # expert parallelism inside one tensor-parallel engine (no attention DP): no all-to-all is priced or set
    tp8 = "tp=8,ep=8,weights=fp8,kv=fp8,max_batch=256"
    assert "all2all" not in script("vllm", tp8, 8, "v8") and "a2a" not in script("sglang", tp8, 8, "s8")


def test_a_multi_node_disaggregated_script_says_its_router_crosses_replicas(tmp_path):
    """One router over two replicas on two nodes pairs a prefill server of one with a decode server of the other:
    the hand-off crosses the network where the estimate prices NVLink inside a replica."""
    plan = "prefill_workers=4,prefill_tp=1,decode_workers=1,decode_tp=4,weights=fp8,kv=fp8,max_batch=128"
    args = ["-f", "vllm", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--input-len", "2048", "--output-len", "256"]
    two = runner.invoke(app, ["emit", plan, *args, "--gpus", "16", "--out", str(tmp_path / "two")])
    assert two.exit_code == 0, two.output
    assert "run one router per replica" in (tmp_path / "two" / "serve_vllm.sh").read_text()
    one = runner.invoke(app, ["emit", plan, *args, "--gpus", "8", "--out", str(tmp_path / "one")])
    assert one.exit_code == 0 and "one router per replica" not in (tmp_path / "one" / "serve_vllm.sh").read_text()


def test_an_exact_and_a_sampled_search_report_the_same_space():
    """An etp equal to tp and "etp as tp" are one plan: the exact enumeration counted them once, the samplers twice
    (DeepSeek-V3 on 2,048 GPUs: 1,451,520 and 1,658,880), so a user could not tell whether they searched one space."""
    import json

    args = ["search", "-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096", "-b", "256",
            "--top", "1", "--json"]
    exact = json.loads(runner.invoke(app, [*args, "--sampler", "exact"]).stdout)["search"]["space_size"]
    sampled = json.loads(runner.invoke(app, [*args, "--sampler", "random", "--trials", "20"]).stdout)["search"]
    assert sampled["space_size"] == exact


def test_explain_offers_a_disaggregated_plan_moves_at_its_gpu_count(tmp_path):
    """Every pool step of 2P(TP2)+1D(TP4) on 8 GPUs changed the GPU count: 11 of 17 rows read "impossible"."""
    import json

    out = tmp_path / "r"
    found = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus",
                                "8", "--input-len", "2048", "--output-len", "256", "--request-rate", "8", "--fix",
                                "mode=disagg", "--fix", "prefill_tp=2", "--fix", "decode_tp=4", "--out", str(out)])
    assert found.exit_code == 0, found.output
    steps = {s["change"]: s for s in json.loads(runner.invoke(app, ["explain", str(out), "--json"]).stdout)
             ["sensitivity"]}
    for change in ("prefill TP2 x2 -> TP1 x4", "decode TP4 x1 -> TP2 x2"):
        assert steps[change]["fits"] and steps[change]["plan"] is not None, steps[change]



def test_quoted_operators_are_arguments_and_unquoted_ones_need_a_shell():
    """shlex.split dropped the quotes: --sep "|" was refused, 1>out.log and bench.py;cat passed."""
    import pytest

    from autotune.errors import InputError
    from autotune.search.tune import parse_command

    for quoted in ('python3 bench.py --sep "|"', "python3 bench.py --filter '>=1.0'", "python3 bench.py --tag '<x>'"):
        parse_command(quoted, shell=False)
    for bare in ("python3 bench.py 1>out.log", "python3 bench.py &>out.log", "python3 bench.py;cat x",
                 "python3 bench.py $(cat args)", "python3 bench.py `cat args`"):
        with pytest.raises(InputError, match="--shell"):
            parse_command(bare, shell=False)


def test_a_log_line_repeating_a_key_does_not_fail_the_trial(tmp_path):
    import sys

    from autotune.search.tune import run_benchmark

    script = tmp_path / "bench.py"
    script.write_text('print(\'{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": 50}\')\n'
                      'print(\'{"event": "done", "t": 1, "t": 2}\')\n')
    measured = run_benchmark([sys.executable, str(script)], {"tp": 1}, timeout_s=30)
    assert measured.status == "ok" and measured.tokens_per_s_per_gpu == 1000, measured


def test_explain_compares_the_inputs_as_resolved(tmp_path):
    """-H H100-SXM5-80GB (the same GPU) and the newest framework release by date were called replacements."""
    out = tmp_path / "pj"
    assert runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b",
                               "64", "--out", str(out)]).exit_code == 0
    for same in (["-H", "H100-SXM5-80GB"], ["--gpus", "8"]):
        assert "did not rank" not in runner.invoke(app, ["explain", str(out), *same]).output, same
    other = runner.invoke(app, ["explain", str(out), "--framework", "megatron-lm@2024-01"])
    assert "--framework megatron-lm" in other.output and "did not rank" in other.output


def test_sglang_low_latency_deepep_holds_a_ranks_batch(tmp_path):
    """DeepEP's low-latency dispatch asserts past SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK (default 128): a
    DEP8 engine at 2,048 sequences runs 256 a rank, and SGLang captures CUDA graphs of up to 512."""
    args = ["-f", "sglang", "-m", "deepseek-v3", "-H", "h200-sxm-141gb", "--gpus", "8", "--checkpoint", "fp8",
            "--input-len", "1024", "--output-len", "1024"]
    result = runner.invoke(app, ["emit", "tp=1,dp=8,ep=8,weights=fp8,kv=fp8,max_batch=2048", *args, "--out",
                                 str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    script = (tmp_path / "a" / "serve_sglang.sh").read_text()
    assert "SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK=512" in script and "--deepep-mode auto" in script


def test_a_block_scale_of_two_widths_needs_whole_blocks_of_both(tmp_path):
    """[64, 128] blocks: the down projection splits the FFN width along its inputs, checked against 128."""
    from autotune.inputs.hf_config import fp8_weight_block

    quant = {"quant_method": "fp8", "weight_block_size": [64, 128]}
    assert fp8_weight_block({"quantization_config": quant}) == 128
    assert fp8_weight_block({"quantization_config": {**quant, "weight_block_size": [128, 128]}}) == 128


def test_a_plan_with_no_room_for_one_sequence_states_no_batch():
    """predict on weights that fill the engine's budget printed "batch 1.0 per replica (KV budget fits 0)": the
    solver's floor of one sequence, which no engine could run."""
    args = ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "2",
            "--input-len", "2048", "--output-len", "256"]
    refused = runner.invoke(app, [*args, "-p", "tp=1,replicas=2,max_batch=64"])
    assert refused.exit_code == 1, refused.output
    assert "no batch per replica (the KV budget holds no sequence)" in refused.output
    assert "batch 1.0" not in refused.output
    fits = runner.invoke(app, [*args, "-p", "tp=2,max_batch=8"])
    assert fits.exit_code == 0, fits.output
    assert "per replica (the KV budget holds " in fits.output and " at full length)" in fits.output


def test_sglang_expert_parallelism_narrower_than_the_engine_is_priced_as_the_gather_it_launches():
    """SGLang's DeepEP needs ep = tp*dp; a plan with ep = tp and attention DP launches the default backend, which
    gathers every token to every GPU, but was priced with DeepEP's once-per-rank dispatch."""
    args = ["predict", "--workload", "serve", "-m", "deepseek-v3", "-H", "h200-sxm-141gb", "--gpus", "16",
            "--input-len", "1024", "--output-len", "1024", "--concurrency", "256", "--json"]

    def tpot(engine, ep):
        import json
        result = runner.invoke(app, [*args, "--engine", engine, "-p", f"tp=8,dp=2,ep={ep},weights=fp8"])
        assert result.exit_code == 0, result.output
        return json.loads(result.stdout)["estimate"]["tpot_ms"]

    from autotune.serving.engines import DEFAULTS
    assert DEFAULTS["sglang"].gathers(8, 2, 8) == 1.0 and DEFAULTS["sglang"].gathers(8, 2, 16) == 0.0
    assert DEFAULTS["trtllm"].gathers(8, 2, 8) == 0.0
    # the gather moves 16 bf16 copies of each token where DeepEP's dispatch moves about 7 in fp8 (8 ranks of 2 GPUs,
    # top-8): TPOT 1.34x that of EP16, where pricing it as DeepEP read 1.15x
    assert tpot("sglang", 8) > 1.25 * tpot("sglang", 16)


def test_calibrating_a_few_rows_keeps_the_shipped_fit_where_they_say_nothing(tmp_path):
    """Five single-GPU dense rows reset every parameter they cannot identify to the documented defaults (the
    all-to-all latency 2.0 -> 20 us, the KV hand-off 72.7 -> 20 ms), which halved a disaggregated MoE TTFT."""
    import csv
    import json

    from autotune.inputs.resources import bundled_data
    from autotune.serving.calibrated import CURRENT, PRIOR

    with open(bundled_data("serving_silicon.csv"), newline="") as handle:
        reader = csv.DictReader(handle)
        columns = reader.fieldnames
        mine = [r for r in reader if r["engine"] == "vllm" and r["tp"] == "1" and r["mode"] == "agg"
                and r["duplicate_primary"] != "false" and "8B" in r["hf_model_id"]][:5]
    assert len(mine) == 5
    path = tmp_path / "mine.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns)
        writer.writeheader()
        writer.writerows(mine)
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "mine.yaml"), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert doc["anchor"] == "shipped"
    fitted = doc["engines"]["vllm"]
    for name in ("alltoall_us", "kv_handoff_ms", "fp4_gemm", "grouped_gemm"):  # nothing in these rows moves them
        shipped, default = getattr(CURRENT["vllm"], name), getattr(PRIOR, name)
        assert abs(fitted[name] - shipped) < 0.1 * abs(default - shipped), (name, fitted[name], shipped, default)


@pytest.mark.parametrize("fmt, flags", [("vllm", "vllm-0.33.0.txt"), ("sglang", "sglang-0.5.23.txt")])
def test_models_with_their_own_code_launch_with_trust_remote_code(tmp_path, fmt, flags):
    """Kimi's tokenizer (tokenization_kimi.py) and MiniMax's model files are the repository's own code: both
    engines refuse to load them without --trust-remote-code, which the launch files never wrote."""
    import json
    from pathlib import Path

    known = (Path(__file__).parent / "data" / "engine_flags" / flags).read_text().split()
    assert "--trust-remote-code" in known

    def script(model, name, plan="tp=8"):
        out = tmp_path / name
        result = runner.invoke(app, ["emit", plan, "--format", fmt, "-m", model, "-H", "h200-sxm-141gb", "--gpus",
                                     "8", "--input-len", "2048", "--output-len", "512", "--out", str(out)])
        assert result.exit_code == 0, result.output
        return next(out.glob("serve_*.sh")).read_text()

    assert "--trust-remote-code" in script("moonshotai/Kimi-K2.5", "kimi")
    assert "--trust-remote-code" in script("minimax-m2.5", "minimax")  # the architecture of a remote-code repository
    assert "--trust-remote-code" not in script("llama3-70b", "llama")
    # a config.json (or a checkpoint folder) of such an architecture says so itself, named any way; an auto_map
    # alone does not: DeepSeek-V3's config has one, and the engines run it natively
    data = Path(__file__).parent / "data" / "hf_configs"
    minimax = tmp_path / "minimax_checkpoint"
    minimax.mkdir()
    (minimax / "config.json").write_text((data / "MiniMax-M2.5" / "config.json").read_text())
    assert "--trust-remote-code" in script(str(minimax), "minimax_folder", "tp=8,ep=8")
    assert "--trust-remote-code" in script(str(minimax / "config.json"), "minimax_file", "tp=8,ep=8")
    deepseek = tmp_path / "deepseek.json"
    deepseek.write_text((data / "DeepSeek-V3" / "config.json").read_text())
    assert "auto_map" in json.loads(deepseek.read_text())
    assert "--trust-remote-code" not in script(str(deepseek), "deepseek_file")
    assert "--trust-remote-code" not in script("deepseek-ai/DeepSeek-V3", "deepseek_id")


def test_deepspeed_autoep_is_not_written_with_zero_3(tmp_path):
    """DeepSpeed's AutoEP supports ZeRO stages 0-2 only; emit wrote "stage": 3 beside expert_parallel.autoep_size and
    a search for --emit deepspeed ranked such plans."""
    args = ["-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096", "-b", "256"]
    refused = runner.invoke(app, ["emit", "ep=8,zero=3,mbs=1", *args, "--format", "deepspeed", "--out",
                                  str(tmp_path / "ds")])
    assert_user_error(refused, "zero")
    assert "does not offer ZeRO-3 with expert parallelism" in refused.output  # the framework's rule, before the format's
    found = runner.invoke(app, ["search", *args, "--emit", "deepspeed", "--out", str(tmp_path / "s"), "--top", "5",
                                "--json"])
    assert found.exit_code == 0, found.output
    import json
    plans = json.loads(found.stdout)["plans"]
    assert plans and not any(p["plan"]["ep"] > 1 and p["plan"]["zero"] == 3 for p in plans)


def test_the_serving_report_front_holds_only_plans_the_checkpoint_runs(tmp_path):
    """The report's throughput-interactivity front passed through NVFP4 plans of an fp8 checkpoint (above the
    search's #1), coloured "meets the targets", though the search ranks them after every plan that runs."""
    import json

    import numpy as np

    from autotune.outputs.report.serving import gather_serving, throughput_interactivity

    out = tmp_path / "r1"
    found = runner.invoke(app, ["search", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", "-H", "b200-sxm-180gb",
                                "--gpus", "8", "--input-len", "1024", "--output-len", "1024", "--concurrency", "256",
                                "--out", str(out)])
    assert found.exit_code == 0, found.output
    data = gather_serving(json.loads((out / "plans.json").read_text()), "plans.json")
    c = data.cloud
    assert c.runnable is not None and c.runnable.any() and (~c.runnable).any()  # fp4 plans need an NVFP4 checkpoint
    best = data.plans[0]["estimate"]["output_tokens_per_s_per_gpu"]
    ok = c.fits & c.runnable & np.isfinite(c.per_gpu)
    assert np.nanmax(c.per_gpu[ok]) <= best * 1.0001 or not data.plans[0]["estimate"].get("meets_targets", True)
    figure = throughput_interactivity(data)
    assert "need another (pre-quantized) checkpoint" in figure.caption


def test_megatron_files_say_the_router_loss_weight_the_config_states(tmp_path):
    """The Megatron script set --moe-aux-loss-coeff 0.01 whatever the config said (Qwen3 0.001, Mixtral 0.02), without
    a word; HF's weight is of another convention (one loss over all layers), so it is said, not copied."""
    import shutil
    from pathlib import Path

    config = tmp_path / "qwen3.json"
    shutil.copy(Path(__file__).parents[1] / "autotune/data/hf_configs/Qwen--Qwen3-30B-A3B.json", config)
    for model, stated in ((str(config), "0.001"), ("mixtral-8x7b", "0.02"), ("deepseek-v3", None)):
        out = tmp_path / Path(model).stem
        result = runner.invoke(app, ["emit", "ep=8", "-m", model, "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096",
                                     "-b", "512", "--format", "megatron", "--allow-no-fit", "--out", str(out)])
        assert result.exit_code == 0, result.output
        text = next(out.glob("*.sh")).read_text()
        if stated is None:  # DeepSeek's expert-bias balancing and its sequence-wise loss
            assert "--moe-aux-loss-coeff 1e-4" in text and "router_aux_loss_coef" not in text
        else:
            assert "--moe-aux-loss-coeff 0.01" in text
            assert f"states router_aux_loss_coef {stated}" in text, text[:3000]


def test_launch_headers_say_what_the_engine_defaults_do_to_the_batch(tmp_path):
    """A plan string without max_batch writes the engine's default limit, which the KV cache may not hold: only an
    explicit max_batch was warned about. SGLang's default reserve at wide attention DP leaves most of HBM outside
    its static pool, presented as the budget autotune checked, with no word of --memory-fraction."""
    def header(fmt, plan, model, hw, gpus):
        out = tmp_path / f"{fmt}{gpus}"
        result = runner.invoke(app, ["emit", plan, "--format", fmt, "-m", model, "-H", hw, "--gpus", str(gpus),
                                     "--input-len", "2048", "--output-len", "512", "--out", str(out)])
        assert result.exit_code == 0, result.output
        return next(out.glob("serve_*.sh")).read_text().split("\n\n")[0]

    kimi = header("vllm", "tp=8", "moonshotai/Kimi-K2.5", "h200-sxm-141gb", 8)
    assert "is the engine's default, and its KV cache holds" in kimi and "which bounds the batch instead" in kimi
    wide = header("sglang", "tp=1,dp=64,ep=64,weights=fp8,kv=fp8", "deepseek-ai/DeepSeek-R1", "gb200-nvl72", 64)
    assert "SGLang's default reserve leaves --mem-fraction-static at 0." in wide and "--memory-fraction F" in wide
    narrow = header("sglang", "tp=8,weights=fp8,kv=fp8,max_batch=64", "deepseek-ai/DeepSeek-R1", "h200-sxm-141gb", 8)
    assert "default reserve leaves" not in narrow


def test_a_rack_scale_slurm_script_says_how_to_keep_its_nodes_in_one_rack(tmp_path):
    """The estimate prices traffic between the trays of a GB200 NVL72 rack at NVLink rates; the Slurm script did not
    say that the allocation must stay in one rack (topology/block's --segment)."""
    def script(hw, gpus, plan, name):
        out = tmp_path / name
        result = runner.invoke(app, ["emit", plan, "-m", "llama3-70b", "-H", hw, "--gpus", str(gpus), "-s", "8192",
                                     "-b", "576", "--format", "slurm", "--out", str(out)])
        assert result.exit_code == 0, result.output
        return (out / "launch.sbatch").read_text()

    rack = script("gb200-nvl72", 72, "tp=4,zero=1", "rack")
    assert "#SBATCH --segment=18" in rack and "\n#SBATCH --segment" not in rack  # said, not imposed
    assert "--segment" not in script("h200-sxm-141gb", 72, "tp=8,zero=1", "hgx")
    # 256 GPUs fill no whole racks: the estimate groups 64 GPUs (16 trays) of each, and so does the note (it had said
    # 18 nodes a rack and pointed at an --segment line 'above' that the file does not have)
    wide = script("gb200-nvl72", 256, "tp=4,zero=1", "wide").replace("\n# ", " ")
    assert "each 16 nodes of 4 GPUs (64 of a rack's 72) in one rack" in wide
    assert "add #SBATCH --segment=16 to the lines above" in wide


def test_explain_says_when_its_better_move_leaves_the_searched_space(tmp_path):
    """explain recommended prefill TP2 x3 -> TP1 x6 over the search's #1, a plan the exact search could never
    return (its space allows 4 workers a pool), without a word."""
    import json

    out = tmp_path / "l70"
    found = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus",
                                "8", "--checkpoint", "fp8", "--input-len", "2048", "--output-len", "256", "--ttft-ms",
                                "2000", "--tpot-ms", "50", "--out", str(out)])
    assert found.exit_code == 0, found.output
    result = runner.invoke(app, ["explain", str(out), "--rank", "1", "--json"])
    assert result.exit_code == 0, result.output
    rows = json.loads(result.stdout)["sensitivity"]
    wide = [r for r in rows if r["plan"] and max(r["plan"].get("prefill_workers", 1), r["plan"].get("decode_workers", 1)) > 4]
    assert wide and all("outside the searched space" in r["outside_space"] for r in wide)
    assert not any(r["outside_space"] for r in rows if r not in wide)


def test_a_plans_csv_row_goes_back_into_predict_as_it_stands(tmp_path):
    """plans.csv held a plan's fields in columns but no plan string: going from a search to predict meant retyping."""
    import csv
    import json

    cases = (["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64"],
             ["--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "1024",
              "--output-len", "256", "--concurrency", "64"])
    for i, args in enumerate(cases):
        out = tmp_path / str(i)
        assert runner.invoke(app, ["search", *args, "--top", "2", "--out", str(out)]).exit_code == 0
        with open(out / "plans.csv", newline="") as handle:
            row = next(csv.DictReader(handle))
        ranked = json.loads((out / "plans.json").read_text())["plans"][0]
        again = runner.invoke(app, ["predict", *args, "-p", row["plan"], "--json"])
        assert again.exit_code == 0, again.output
        assert json.loads(again.stdout)["plan"] == ranked["plan"]


def test_explain_keeps_a_moe_plans_tp_and_pp_steps_inside_the_rules(tmp_path):
    """explain moved etp with tp and never ep, so the tp and pp steps of an EP16 ETP1 plan read "breaks a rule: etp*ep
    does not divide the ranks of a pipeline stage" where TP2 ETP1 (MoE folding) and EP8 are valid neighbours."""
    import json

    out = tmp_path / "q30"
    found = runner.invoke(app, ["search", "-m", "qwen3-30b-a3b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096",
                                "-b", "512", "--fix", "ep=16", "--fix", "etp=1", "--fix", "tp=1", "--out", str(out)])
    assert found.exit_code == 0, found.output
    result = runner.invoke(app, ["explain", str(out), "--rank", "1", "--json"])
    assert result.exit_code == 0, result.output
    steps = [r for r in json.loads(result.stdout)["sensitivity"] if r["axis"] in ("tp", "pp")]
    assert steps and not any("etp*ep" in (r.get("reason") or "") for r in steps), steps
    up = next(r for r in steps if r["change"].startswith("tp 1 -> 2"))
    assert up["plan"]["etp"] == 1 and up["plan"]["ep"] == 16
    deeper = next(r for r in steps if r["change"].startswith("pp 1 -> 2"))
    assert deeper["plan"]["ep"] == 8 and "ep 16 -> 8" in deeper["change"]


def test_a_misspelled_training_runs_column_is_said(tmp_path):
    """measured_memory_gib for measured_memory_gib_per_gpu (999 GiB in it) was dropped without a word, and the
    memory comparison with it."""
    import csv
    from pathlib import Path

    with open(Path(__file__).parent / "data" / "training_runs_small.csv", newline="") as handle:
        rows = list(csv.reader(handle))[:3]
    header = [c for c in rows[0] if c != "measured_memory_gib_per_gpu"]
    keep = [rows[0].index(c) for c in header]
    path = tmp_path / "typo.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(header + ["measured_memory_gib"])
        writer.writerows([[r[i] for i in keep] + ["999"] for r in rows[1:]])
    for command in (["validate", str(path)], ["calibrate", str(path), "--out", str(tmp_path / "c.yaml")]):
        result = runner.invoke(app, command)
        assert "'measured_memory_gib' (did you mean 'measured_memory_gib_per_gpu'?) are not read" in result.stderr, \
            result.output
    bundled = runner.invoke(app, ["validate", "--bundled", "training"])
    assert "are not read" not in bundled.stderr


def test_a_profile_file_borrowing_a_bundled_name_is_said(tmp_path):
    """H100 figures in a file named a100-sxm4-80gb were headlined as an A100 with the A100's error band, silently."""
    from pathlib import Path

    bundled = (Path(__file__).parents[1] / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    borrowed = tmp_path / "a100.yaml"
    borrowed.write_text(bundled.replace("name: h100-sxm5-80gb", "name: a100-sxm4-80gb", 1))
    copy = tmp_path / "h100.yaml"
    copy.write_text(bundled)
    args = ["search", "-m", "llama3-8b", "--gpus", "8", "-s", "4096", "-b", "64", "--top", "1"]
    said = runner.invoke(app, [*args, "-H", str(borrowed)])
    assert said.exit_code == 0, said.output
    # the figures that decide a plan first (they had been listed alphabetically: average_power_w, calibrated, ...)
    assert "names itself 'a100-sxm4-80gb', a bundled profile, with other figures (peak_tflops, memory_gib, memory_bandwidth_gb_per_s" in said.stderr
    same = runner.invoke(app, [*args, "-H", str(copy)])  # the bundled profile itself: nothing to say
    assert same.exit_code == 0 and "names itself" not in same.stderr


@pytest.mark.parametrize("text", ["1:20", "0x20", "010"])
def test_yaml_numbers_are_decimal(tmp_path, text):
    """YAML 1.1 read n_layers: 1:20 as 80 (base 60), 0x20 as 32 and 010 as 8: another model without a word."""
    from pathlib import Path

    spec = (Path(__file__).parents[1] / "profiles" / "models" / "llama3-8b.yaml").read_text()
    lines = [f"n_layers: {text}" if line.startswith("n_layers:") else line for line in spec.splitlines()]
    path = tmp_path / "odd.yaml"
    path.write_text("\n".join(lines) + "\n")
    result = runner.invoke(app, ["models", "show", str(path)])
    assert_user_error(result, "n_layers")
    assert f"must be an integer, but got '{text}'" in result.output


def test_yaml_decimal_numbers_still_read():
    import yaml

    from autotune.inputs.loading import _Loader

    doc = yaml.load("a: 1_000\nb: 6e-1\nc: .5\nd: -3\ne: 1.0e+3\nf: .inf\n", Loader=_Loader)
    assert doc == {"a": 1000, "b": 0.6, "c": 0.5, "d": -3, "e": 1000.0, "f": float("inf")}
    assert yaml.safe_load("a: 0x20") == {"a": 32}  # PyYAML's own loader is left as it was


def test_an_fp8_checkpoint_of_no_fp8_format_is_refused(tmp_path):
    """quantization_config.fmt 'e9m9' was planned as fp8 without a word."""
    import json
    from pathlib import Path

    config = json.loads((Path(__file__).parents[1] / "autotune/data/hf_configs/Qwen--Qwen3-235B-A22B-FP8.json")
                        .read_text())
    config["quantization_config"]["fmt"] = "e9m9"
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", str(path), "-H", "h200-sxm-141gb", "--gpus", "8",
                                 "--input-len", "1024", "--output-len", "256", "-p", "tp=4,ep=4"])
    assert_user_error(result, "quantization_config.fmt")
    assert "e9m9" in result.output


def test_a_calibration_without_held_out_error_says_so(tmp_path):
    """calibrate on one row wrote an overlay at 0.0% error with no caution, which then moves every prediction of
    that GPU."""
    import csv
    from pathlib import Path

    with open(Path(__file__).parent / "data" / "training_runs_small.csv", newline="") as handle:
        rows = list(csv.reader(handle))[:2]
    path = tmp_path / "one.csv"
    with open(path, "w", newline="") as handle:
        csv.writer(handle).writerows(rows)
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(tmp_path / "one.yaml")])
    assert result.exit_code == 0, result.output
    assert "no held-out error: 1 row(s) from one source group" in result.stderr


def test_the_sglang_reserve_note_is_for_the_default_rule_only(tmp_path):
    """The header said 'SGLang's default reserve leaves --mem-fraction-static at 0.3' and pointed to --memory-fraction
    when the user had just set --memory-fraction 0.3."""
    out = tmp_path / "set"
    result = runner.invoke(app, ["emit", "tp=1,dp=64,ep=64,weights=fp8,kv=fp8", "--format", "sglang", "-m",
                                 "deepseek-ai/DeepSeek-R1", "-H", "gb200-nvl72", "--gpus", "64", "--input-len", "2048",
                                 "--output-len", "512", "--memory-fraction", "0.3", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "default reserve leaves" not in (out / "serve_sglang.sh").read_text()


README_SEARCH = ["search", "--model", "llama3-70b", "--hardware", "h100-sxm5-80gb", "--gpus", "64", "--seq-len", "8192",
                 "--global-batch", "512", "--top", "5"]


def test_a_best_resting_on_unvalidated_features_names_the_validated_plan_beside_it():
    """The README's #1 (optimizer offload, which no validated H100 run used) beat #2 (validated features
    only) by 0.08%, far inside the estimate's error, without a word."""
    result = runner.invoke(app, README_SEARCH)
    assert result.exit_code == 0, result.output
    line = next(x for x in result.output.splitlines() if x.startswith("#2 TP4 DP16"))
    assert "within 0.1% of it" in line and "offload on h100-sxm5-80gb" in line and "prefer #2" in line
    # a best without unvalidated features needs no such line
    plain = runner.invoke(app, [*README_SEARCH, "--fix", "offload=none"])
    assert plain.exit_code == 0, plain.output
    assert "prefer #" not in plain.output


def test_a_config_whose_architectures_contradict_its_model_type_is_said(tmp_path):
    """A Qwen3 config.json naming LlamaForCausalLM was planned as Qwen3 without a word, though vLLM and SGLang
    build the class architectures names (a Llama, without Qwen3's QK norm)."""
    import json
    from pathlib import Path

    from autotune.inputs.hf_config import architecture_note

    config = json.loads((Path(__file__).parents[1] / "autotune" / "data" / "hf_configs" / "Qwen--Qwen3-30B-A3B.json")
                        .read_text())
    contradicting = tmp_path / "config.json"
    contradicting.write_text(json.dumps({**config, "architectures": ["LlamaForCausalLM"]}))
    args = ["predict", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64", "-p", "tp=4,zero=3,recompute=full"]
    said = runner.invoke(app, [*args, "-m", str(tmp_path)])
    assert said.exit_code == 0, said.output
    assert "architectures names LlamaForCausalLM (a llama model) but model_type is 'qwen3_moe'" in said.stderr
    # Kimi-K2 names the DeepSeek-V3 class its engines run it with; wrappers name their own class
    assert architecture_note({"model_type": "kimi_k2", "architectures": ["DeepseekV3ForCausalLM"]}, source="k") == ""
    assert architecture_note({"model_type": "qwen3_5_moe", "architectures": ["Qwen3_5MoeForConditionalGeneration"]},
                             source="q") == ""
    assert architecture_note({"model_type": "llama", "architectures": ["MyOwnForCausalLM"]}, source="m") == ""
    agreeing = runner.invoke(app, [*args, "-m", str(Path(__file__).parents[1] / "autotune" / "data" / "hf_configs"
                                                   / "Qwen--Qwen3-30B-A3B.json")])
    assert agreeing.exit_code == 0 and "architectures names" not in agreeing.stderr


def test_a_plans_file_whose_workload_breaks_a_rule_names_its_fields_in_the_fix(tmp_path):
    """A serving plans.json written before --output-len 1 with a TPOT target was refused told the reader to give
    --output-len and drop --tpot-ms, flags of a command they were not running."""
    import json

    out = tmp_path / "p"
    searched = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                                   "2", "--input-len", "1000", "--output-len", "100", "--tpot-ms", "50", "--out",
                                   str(out)])
    assert searched.exit_code == 0, searched.output
    document = json.loads((out / "plans.json").read_text())
    document["inputs"]["output_len"] = 1
    (out / "plans.json").write_text(json.dumps(document))
    result = runner.invoke(app, ["explain", str(out)])
    assert_user_error(result, "plans.json", "inputs.tpot_ms")
    assert "give inputs.output_len 2 or more, or drop inputs.tpot_ms" in result.stderr and "--" not in result.stderr


def test_search_emit_does_not_load_the_bf16_id_of_an_fp8_plan(tmp_path):
    """search --emit with a bf16 Hugging Face id and --checkpoint fp8 wrote MODEL=<the bf16 id>: the engines would
    load twice the planned weight bytes.  emit on the same plans.json asked for MODEL instead."""
    out = tmp_path / "l70"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "meta-llama/Llama-3.1-70B-Instruct", "-H",
                                 "h100-sxm5-80gb", "--gpus", "8", "--checkpoint", "fp8", "--input-len", "2048",
                                 "--output-len", "512", "--concurrency", "64", "--out", str(out), "--emit",
                                 "vllm,sglang"])
    assert result.exit_code == 0, result.output
    for script in ("serve_vllm.sh", "serve_sglang.sh"):
        text = (out / script).read_text()
        assert "MODEL=meta-llama/Llama-3.1-70B-Instruct" not in text and "MODEL must name" in text, script


def test_deepspeed_zero3_with_expert_parallelism_is_never_ranked():
    """search --framework deepspeed ranked EPx DP64 ZeRO-3 plans first to fourth for Mixtral; DeepSpeed's MoE asserts
    'MoE not supported with Stage 3', and emit refused the winner."""
    args = ["-m", "mixtral-8x22b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096", "-b", "512"]
    for framework in ("deepspeed", "megatron-deepspeed"):
        searched = runner.invoke(app, ["search", *args, "--framework", framework, "--top", "5", "--json"])
        assert searched.exit_code == 0, searched.output
        import json

        plans = [r["plan"] for r in json.loads(searched.stdout)["plans"]]
        assert plans and not any(p["zero"] == 3 and p["ep"] > 1 for p in plans), framework
    refused = runner.invoke(app, ["predict", *args, "--framework", "deepspeed", "-p", "ep=4,zero=3,mbs=1,recompute=full"])
    assert refused.exit_code == 1 and "does not offer ZeRO-3 with expert parallelism (ep=4)" in refused.output


def test_sglang_dense_dp_replicas_each_admit_their_share_of_the_batch(tmp_path):
    """A dense TP2 DP2 plan with max_batch 256 (128 a replica, as its memory and TPOT were estimated) wrote
    --dp-size 2 --max-running-requests 256: each dense replica admits the whole flag, 512 in all."""
    out = tmp_path / "q"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "Qwen/Qwen3-32B", "-H", "h100-sxm5-80gb",
                                 "--gpus", "8", "--engine", "sglang", "--fix", "dp=2", "--fix", "mode=agg",
                                 "--input-len", "1024", "--output-len", "1024", "--concurrency", "512", "--out",
                                 str(out), "--emit", "sglang"])
    assert result.exit_code == 0, result.output
    import json

    plan = json.loads((out / "plans.json").read_text())["plans"][0]["plan"]
    script = (out / "serve_sglang.sh").read_text()
    assert plan["dp"] == 2 and "--dp-size 2" in script and "--attn-dp-size" not in script
    assert f"--max-running-requests {plan['max_batch'] // 2}" in script


@pytest.mark.parametrize("fmt", ["megatron", "deepspeed", "slurm"])
def test_optimizer_offload_scripts_give_cpu_adam_the_nodes_cores(tmp_path, fmt):
    """Offload plans ran CPU Adam with OMP_NUM_THREADS=1 a rank (the Slurm script's, or torchrun's default), far
    below the host optimizer rate the estimate takes."""
    import subprocess

    out = tmp_path / fmt
    plan = "zero=2,mbs=1,recompute=full,offload=cpu"
    result = runner.invoke(app, ["emit", plan, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "8192",
                                 "-b", "512", "--format", fmt, "--out", str(out)])
    assert result.exit_code == 0, result.output
    text = "\n".join(p.read_text() for p in out.iterdir() if p.suffix in (".sh", ".sbatch"))
    line = next(x for x in text.splitlines() if x.startswith("export OMP_NUM_THREADS="))
    assert "OMP_NUM_THREADS=1" not in text
    threads = subprocess.run(["bash", "-c", f"nproc() {{ echo 224; }}; {line}; echo $OMP_NUM_THREADS"],
                             capture_output=True, text=True, check=True).stdout.strip()
    assert threads == "28"  # 224 cores shared by 8 ranks
    plain = runner.invoke(app, ["emit", plan.replace("offload=cpu", "offload=none"), "-m", "llama3-8b", "-H",
                                "h100-sxm5-80gb", "--gpus", "64", "-s", "8192", "-b", "512", "--format", fmt, "--out",
                                str(tmp_path / "plain")])
    assert plain.exit_code == 0 and "$(nproc)" not in "\n".join(p.read_text() for p in (tmp_path / "plain").iterdir())


def test_a_calibration_overlay_says_the_error_band_is_the_bundled_fits(tmp_path):
    """predict --calibration moved the estimate and still printed the bundled calibration's band as its expected
    error, without a word."""
    import json

    overlay = tmp_path / "cal.yaml"
    overlay.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency:\n      gemm: 0.57\n")
    args = ["predict", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64", "-p",
            "tp=2,zero=1,recompute=full"]
    said = runner.invoke(app, [*args, "--calibration", str(overlay)])
    assert said.exit_code == 0, said.output
    assert f"with --calibration {overlay.name} they do not describe this estimate" in said.stdout.replace("\n", " ")
    as_json = runner.invoke(app, [*args, "--calibration", str(overlay), "--json"])
    assert json.loads(as_json.stdout)["estimate"]["confidence"]["calibration"] == overlay.name
    assert "do not describe" not in runner.invoke(app, args).stdout


def test_the_serving_reports_table_says_which_plans_need_another_checkpoint(tmp_path):
    """The search's table marks int8 plans of an fp8 checkpoint NEEDS; the report's top-plans table listed them
    as 'meets' only."""
    out = tmp_path / "s"
    searched = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3.1-70b", "-H", "h200-sxm-141gb",
                                   "--checkpoint", "fp8", "--gpus", "1..32", "--input-len", "2048", "--output-len",
                                   "256", "--request-rate", "20", "--ttft-ms", "1000", "--tpot-ms", "30", "--top", "8",
                                   "--out", str(out), "--json"])
    assert searched.exit_code == 0, searched.output
    import json

    plans = json.loads(searched.stdout)["plans"]
    needing = [p["rank"] for p in plans if p["estimate"].get("weights_from") == "needs"]
    assert needing, "the case needs a plan that runs only from another checkpoint"
    reported = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r")])
    assert reported.exit_code == 0, reported.output
    html = (tmp_path / "r" / "report.html").read_text()
    rows = html.split("<h2>Top plans</h2>")[1].split("</table>")[0].split("<tr>")[2:]
    for rank, row in enumerate(rows, start=1):
        assert ("; needs " in row) == (rank in needing), row


def test_search_emit_quotes_the_other_engine_with_the_overlays_parameters(tmp_path):
    """With --calibration, the SGLang script of a search ranked for vLLM quoted the shipped fit (3,123 tok/s) where
    predict --engine sglang with the same overlay gave 3,602."""
    overlay = tmp_path / "cal.yaml"
    overlay.write_text("schema: serving\nengines:\n  vllm: {kv_handoff_ms: 5.0, layer_us: 20.0}\n"
                       "  sglang: {kv_handoff_ms: 5.0, layer_us: 20.0}\n")
    common = ["--workload", "serve", "-m", "llama3.1-70b", "--checkpoint", "fp8", "-H", "h100-sxm5-80gb", "--gpus",
              "8", "--input-len", "2048", "--output-len", "512", "--concurrency", "64", "--calibration", str(overlay)]
    out = tmp_path / "s"
    searched = runner.invoke(app, ["search", *common, "--out", str(out), "--emit", "vllm,sglang"])
    assert searched.exit_code == 0, searched.output
    import json

    plan = json.loads((out / "plans.json").read_text())["plans"][0]["plan"]
    predicted = runner.invoke(app, ["predict", *common, "--engine", "sglang", "--json", "-p",
                                    ",".join(f"{k}={v}" for k, v in plan.items())])
    tokens = json.loads(predicted.stdout)["estimate"]["output_tokens_per_s"]
    assert f"# predicted at 64 concurrent users: {tokens:,.0f} output tokens/s" in (out / "serve_sglang.sh").read_text()
    # emit on the plans.json records the overlay for vLLM only: it says that its SGLang figures are the shipped fit's
    emitted = runner.invoke(app, ["emit", str(out / "plans.json"), "--format", "sglang", "--out", str(tmp_path / "e")])
    assert emitted.exit_code == 0, emitted.output
    assert "its sglang figures use the shipped sglang parameters" in emitted.stderr.replace("\n", " ")


def test_review_of_this_sessions_diff_small_findings(tmp_path):
    """The independent review's small findings: Qwen3.5's text config was told its architectures contradict it;
    a stray rotary_dim outside MiniMax-M2 set --rotary-percent; attention_bias 'yes' was ignored; a framework
    profile written before zero3_with_ep no longer loaded; a 19-node NVL72 job was told --segment=1."""
    import yaml
    from pathlib import Path

    from autotune.errors import InputError
    from autotune.inputs.framework import load_profile
    from autotune.inputs.hf_config import architecture_note, spec_mapping_from_hf

    assert architecture_note({"model_type": "qwen3_5_moe_text", "architectures": ["Qwen3_5MoeForCausalLM"]},
                             source="q") == ""
    base = {"model_type": "qwen2", "num_hidden_layers": 4, "hidden_size": 1024, "intermediate_size": 2048,
            "num_attention_heads": 8, "num_key_value_heads": 4, "vocab_size": 1000}
    assert "rotary_percent" not in spec_mapping_from_hf({**base, "rotary_dim": 64}, source="c.json")
    with pytest.raises(InputError, match="attention_bias"):
        spec_mapping_from_hf({**base, "model_type": "llama", "attention_bias": "yes"}, source="c.json")
    data = yaml.safe_load((Path(__file__).parents[1] / "profiles" / "frameworks" / "other.yaml").read_text())
    del data["traits"]["zero3_with_ep"], data["sources"]["zero3_with_ep"]
    old = tmp_path / "fw.yaml"
    old.write_text(yaml.safe_dump(data))
    assert load_profile(str(old)).at().zero3_with_ep is True
    out = tmp_path / "s"
    result = runner.invoke(app, ["emit", "tp=2,zero=1", "-m", "llama3-8b", "-H", "gb200-nvl72", "-n", "76", "-s", "4096",
                                 "-b", "608", "--format", "slurm", "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "--segment=1 " not in (out / "launch.sbatch").read_text()


def test_a_study_of_an_older_framework_profile_says_to_start_anew():
    """A study stored before a framework trait was added was told to 'run with the study's flags', which it was."""
    from autotune.errors import InputError
    from autotune.search.fingerprint import check_same_problem

    stored = {"framework": {"name": "megatron-lm", "version": None, "zero2": "accumulate_unsharded"}}
    current = {"framework": {"name": "megatron-lm", "version": None, "zero2": "accumulate_unsharded",
                             "fp8_weight_cache_bytes": 2.0}}
    with pytest.raises(InputError, match="another version of its framework profile .* pass --new"):
        check_same_problem(stored, current, study="s")
    other = {"framework": {"name": "torchtitan", "version": None, "zero2": "accumulate_unsharded"}}
    with pytest.raises(InputError, match="made for another problem"):
        check_same_problem(stored, other, study="s")


@pytest.mark.parametrize("key", ["off", "yes", "7", "~"])
def test_a_yaml_key_that_reads_as_no_name_is_refused_naming_it(tmp_path, key):
    """YAML 1.1 reads off:, yes:, 7: and ~: as a boolean, a number and null: the key checks crashed with a
    TypeError traceback on them (fuzz review: 16 tracebacks over --model, --hardware, --space, --calibration)."""
    from pathlib import Path

    bundled = (Path(__file__).parents[1] / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text()
    path = tmp_path / "hw.yaml"
    path.write_text(bundled + f"{key}: 1\n")
    for args in (["hardware", "show", str(path)],
                 ["predict", "-p", "tp=1", "-m", "llama3-8b", "-H", str(path), "--gpus", "8", "-s", "2048", "-b", "32"]):
        result = runner.invoke(app, args)
        assert_user_error(result, "hw.yaml", "which YAML reads as")


def test_fuzz_review_silent_accepts(tmp_path):
    """Accepted without a word: a profile priced at $1,000,000 a GPU-hour (--price refuses above 1,000); a MoE
    layer_interval past the last layer (Mixtral shrank to 8.5B); --precision bf16,bf16; plan digits of another
    script (tp=٢ ran as TP2)."""
    from pathlib import Path

    root = Path(__file__).parents[1]
    priced = tmp_path / "hw.yaml"
    priced.write_text((root / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text().replace(
        "price_usd_per_gpu_hour:", "price_usd_per_gpu_hour: 1000000 #", 1))
    base = ["-m", "llama3-8b", "--gpus", "8", "-s", "2048", "-b", "32"]
    assert_user_error(runner.invoke(app, ["predict", "-p", "tp=1", *base, "-H", str(priced)]), "hw.yaml",
                      "price_usd_per_gpu_hour")
    spec = tmp_path / "moe.yaml"
    spec.write_text((root / "profiles" / "models" / "mixtral-8x7b.yaml").read_text().replace(
        "moe:\n", "moe:\n  layer_interval: 100\n", 1))
    assert_user_error(runner.invoke(app, ["models", "show", str(spec)]), "moe.yaml", "layer_interval")
    assert_user_error(runner.invoke(app, ["search", *base, "-H", "h100-sxm5-80gb", "--precision", "bf16,bf16"]),
                      "--precision", "once")
    assert_user_error(runner.invoke(app, ["predict", "-p", "tp=\u0662", *base, "-H", "h100-sxm5-80gb"]), "ASCII digits")


def test_a_misspelled_benchmark_result_key_is_said():
    """tune kept {"peak_memory_gb": 70} under 'extra' and dropped the memory comparison without a word."""
    from autotune.search.tune import unread_result_keys_note

    note = unread_result_keys_note({"peak_memory_gb": 70, "loss": 2.1})
    assert "'peak_memory_gb' (did you mean 'peak_memory_gib'?)" in note and "loss" not in note
    assert unread_result_keys_note({"loss": 2.1}) == "" and unread_result_keys_note(None) == ""


def test_a_silicon_rows_duplicate_primary_must_be_a_boolean(tmp_path):
    """duplicate_primary 'maybe' was counted as a primary measurement."""
    import csv
    from pathlib import Path

    source = Path(__file__).parents[1] / "autotune" / "data" / "serving_silicon.csv"
    with source.open(newline="") as f:
        reader = csv.DictReader(f)
        rows = [next(reader)]
        fields = reader.fieldnames
    rows[0]["duplicate_primary"] = "maybe"
    path = tmp_path / "rows.csv"
    with path.open("w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    assert_user_error(runner.invoke(app, ["validate", str(path)]), "rows.csv", "duplicate_primary", "maybe")


@pytest.mark.parametrize("key, value", [("tokens_per_s_per_gpu", -5), ("memory_gib_per_gpu", 1e300), ("mfu", 3.0)])
def test_the_training_report_refuses_an_estimate_no_search_writes(tmp_path, key, value):
    """report printed a hand-edited plans.json's '-5 tokens/s per GPU' and a 300-digit GiB figure as they stood."""
    import json

    out = tmp_path / "s"
    assert runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "2048", "-b",
                               "32", "--out", str(out)]).exit_code == 0
    document = json.loads((out / "plans.json").read_text())
    document["plans"][0]["estimate"][key] = value
    (out / "plans.json").write_text(json.dumps(document))
    result = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r"), "--trials", "0"])
    assert_user_error(result, "plans.json", f"estimate.{key}")


def test_a_file_of_another_kind_given_as_a_model_or_profile_is_named(tmp_path):
    """A plans.json given to --model said 'missing required key(s) model_type', and a runs CSV given to --model or
    --hardware 'malformed YAML at line 2, column 346'."""
    from pathlib import Path

    out = tmp_path / "s"
    assert runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "2048", "-b",
                               "32", "--out", str(out)]).exit_code == 0
    base = ["predict", "-p", "tp=1", "--gpus", "8", "-s", "2048", "-b", "32"]
    assert_user_error(runner.invoke(app, [*base, "-m", str(out / "plans.json"), "-H", "h100-sxm5-80gb"]),
                      "is a plans.json", "autotune explain")
    runs = Path(__file__).parents[1] / "examples" / "data" / "my_runs.csv"
    for args in (["-m", str(runs), "-H", "h100-sxm5-80gb"], ["-m", "llama3-8b", "-H", str(runs)]):
        assert_user_error(runner.invoke(app, [*base, *args]), "my_runs.csv", "is a table (CSV)")


def test_capacity_planning_names_what_is_wrong_before_what_is_missing():
    """An unknown profile or a bad --deadline were reported only as 'capacity planning needs the training budget'."""
    base = ["search", "-m", "llama3-8b", "--gpus", "8..16", "-s", "2048", "-b", "32"]
    assert_user_error(runner.invoke(app, [*base, "-H", "h100-sxm5-80gb,foo"]), "--hardware", "foo")
    assert_user_error(runner.invoke(app, [*base, "-H", "h100-sxm5-80gb", "--deadline", "0d"]), "--deadline")
