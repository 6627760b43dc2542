"""--memory-fraction: the value a user sets on the engine's memory flag, through search, predict, emit, explain
and report (docs/serving.md, "Memory: the engine's own budget")."""

from __future__ import annotations

import json

import pytest

from tests.test_bad_input import assert_user_error, invoke, predicted

GIB = 2**30
SERVE = ["--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "-n", "8", "--input-len", "1024",
         "--output-len", "256", "--concurrency", "64"]


def _predict(engine: str, fraction: float | None, plan: str = "tp=4,weights=fp8") -> dict:
    args = ["predict", *SERVE, "--plan", plan, "--engine", engine, "--json"]
    if fraction is not None:
        args += ["--memory-fraction", str(fraction)]
    return predicted(invoke(*args))["estimate"]  # exit 1 where it does not fit, its numbers printed


def _pool_gib(estimate: dict) -> float:
    return estimate["memory_breakdown_gib"]["kv_pool"]


def test_vllm_gives_the_kv_pool_what_the_raised_utilisation_adds():
    """vLLM caps everything at u x memory: raising u from 0.92 to 0.95 on an H100 (79.1 GiB as CUDA reports it) adds
    0.03 x 79.1 = 2.373 GiB to the KV pool (weights, activations, graphs and runtime do not change)."""
    default, raised = _predict("vllm", None), _predict("vllm", 0.95)
    assert default["engine_memory_flag"] == {"--gpu-memory-utilization": 0.92}
    assert raised["engine_memory_flag"] == {"--gpu-memory-utilization": 0.95}
    assert raised["memory_budget_gib"] == pytest.approx(0.95 * 79.1)
    assert _pool_gib(raised) - _pool_gib(default) == pytest.approx(2.373, abs=1e-6)
    assert raised["max_batch_fit"] > default["max_batch_fit"]


def test_sglang_pool_is_the_fraction_of_memory_less_the_weights():
    """SGLang's --mem-fraction-static f caps weights plus KV: pool = f x 80 GiB - weights."""
    low, high = _predict("sglang", 0.80), _predict("sglang", 0.85)
    weights = low["memory_breakdown_gib"]["weights"]
    assert _pool_gib(low) == pytest.approx(0.80 * 79.1 - weights, abs=1e-6)
    assert _pool_gib(high) - _pool_gib(low) == pytest.approx(0.05 * 79.1, abs=1e-6)
    assert high["engine_memory_flag"] == {"--mem-fraction-static": 0.85}


def test_trtllm_pool_scales_with_its_free_memory_fraction():
    """TensorRT-LLM gives the KV cache a fraction of what weights and activations leave."""
    default, raised = _predict("trtllm", None), _predict("trtllm", 0.95)
    assert _pool_gib(raised) / _pool_gib(default) == pytest.approx(0.95 / 0.90, rel=1e-9)


def test_sglang_refuses_a_fraction_that_leaves_no_room_for_activations():
    estimate = _predict("sglang", 0.99)
    assert estimate["fits"] is False
    assert "--mem-fraction-static 0.99 leaves less memory outside the pool than activations, CUDA graphs and the " \
           "runtime need" == estimate["infeasible_reason"]
    mem = estimate["memory_breakdown_gib"]
    assert (1 - 0.99) * 79.1 < mem["activations"] + mem["cuda_graphs"] + mem["runtime"]


def test_a_search_counts_the_sglang_refusal_as_one_reason(tmp_path):
    """Every plan the fraction starves is refused for the same reason, so the rejected counts hold one entry."""
    out = tmp_path / "plans"
    result = invoke("search", *SERVE, "--engine", "sglang", "--memory-fraction", "0.97", "--out", out)
    assert result.exit_code == 0, result.output
    rejected = json.loads((out / "plans.json").read_text())["search"]["rejected"]
    starved = [k for k in rejected if k.startswith("--mem-fraction-static 0.97 leaves")]
    assert len(starved) == 1 and rejected[starved[0]] > 1


def test_the_python_api_takes_numpy_numbers_and_records_the_checked_value(tmp_path):
    import numpy as np

    from autotune.inputs.workload import ServeWorkload
    from autotune.search.api import ServingSearch, search_serving

    outcome = search_serving(ServingSearch(model="llama3-70b", hardware="h100-sxm5-80gb", gpus=8, top=1,
                                           workload=ServeWorkload(1024, 256, concurrency=64),
                                           memory_fraction=np.float32(0.95)))
    assert outcome.to_json()["inputs"]["memory_fraction"] == 0.95
    assert outcome.result.ranked[0].estimate["engine_memory_flag"] == {"--gpu-memory-utilization": 0.95}


def test_search_records_the_fraction_and_every_output_reads_it_back(tmp_path):
    out = tmp_path / "plans"
    result = invoke("search", *SERVE, "--memory-fraction", "0.95", "--out", out, "--emit", "vllm,sglang", "-k", "2")
    assert result.exit_code == 0, result.output
    document = json.loads((out / "plans.json").read_text())
    assert document["inputs"]["memory_fraction"] == 0.95
    assert document["plans"][0]["estimate"]["engine_memory_flag"] == {"--gpu-memory-utilization": 0.95}
    vllm_script = (out / "serve_vllm.sh").read_text()
    assert "--gpu-memory-utilization 0.95 " in vllm_script
    # the SGLang files launch the vLLM-ranked plan on SGLang: 0.95 is a vLLM value, SGLang keeps its own rule
    assert "--mem-fraction-static 0.95" not in (out / "serve_sglang.sh").read_text()
    emitted = invoke("emit", out / "plans.json", "-f", "vllm")
    assert emitted.exit_code == 0, emitted.output
    assert "--gpu-memory-utilization 0.95 " in emitted.stdout
    overridden = invoke("emit", out / "plans.json", "-f", "vllm", "--memory-fraction", "0.9")
    assert overridden.exit_code == 0, overridden.output
    assert "--gpu-memory-utilization 0.9 " in overridden.stdout
    assert "--gpu-memory-utilization 0.95" not in overridden.stdout
    explained = invoke("explain", out / "plans.json")
    assert explained.exit_code == 0, explained.output
    assert "memory flag 0.95 (--memory-fraction)" in explained.stdout.replace("\n", "")
    report = invoke("report", out / "plans.json", "--out", tmp_path / "report")
    assert report.exit_code == 0, report.output


def test_emit_from_a_plan_string_sets_the_stated_fraction():
    result = invoke("emit", "--plan", "tp=4,weights=fp8", "-f", "sglang", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                    "-n", "8", "--input-len", "1024", "--output-len", "256", "--memory-fraction", "0.85")
    assert result.exit_code == 0, result.output
    assert "--mem-fraction-static 0.85 " in result.stdout


@pytest.mark.parametrize("value", ["0", "-0.5", "1.5", "nan", "inf", "-inf", "0.9512345", "0.9999999", "1e-320"])
@pytest.mark.parametrize("command", ["predict", "search", "emit"])
def test_a_fraction_outside_zero_to_one_is_refused(command, value):
    if command == "emit":
        args = ["emit", "--plan", "tp=4", "-f", "vllm", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "-n", "8",
                "--input-len", "1024", "--output-len", "256"]
    else:
        args = [command, *SERVE] + (["--plan", "tp=4"] if command == "predict" else [])
    # NaN and infinity are caught for every number option, before this one's own rule (which names the fix)
    fix = "finite number" if value in ("nan", "inf", "-inf") else "leave --memory-fraction out"
    assert_user_error(invoke(*args, "--memory-fraction", value), "--memory-fraction", fix)


def test_training_refuses_the_serving_flag():
    assert_user_error(invoke("predict", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "-n", "8", "-s", "4096", "-b",
                             "64", "--plan", "tp=8", "--memory-fraction", "0.9"), "--memory-fraction", "training")


@pytest.mark.parametrize("value, needle", [(1.7, "0 < fraction <= 1"), ("x", "must be a number"), (0, "0 < fraction <= 1"),
                                           (None, "must be a number"), (True, "must be a number"),
                                           (0.95123, "three decimals")])
def test_a_plans_json_with_a_bad_fraction_names_the_field(tmp_path, value, needle):
    out = tmp_path / "plans"
    assert invoke("search", *SERVE, "--memory-fraction", "0.95", "--out", out, "-k", "1").exit_code == 0
    document = json.loads((out / "plans.json").read_text())
    document["inputs"]["memory_fraction"] = value
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps(document))
    for args in (("emit", bad, "-f", "vllm"), ("explain", bad), ("report", bad, "--out", tmp_path / "r")):
        assert_user_error(invoke(*args), "inputs.memory_fraction", needle, "leave the key out")


def test_emit_for_another_engine_says_the_recorded_fraction_is_not_its_own(tmp_path):
    out = tmp_path / "plans"
    assert invoke("search", *SERVE, "--memory-fraction", "0.95", "--out", out, "-k", "1").exit_code == 0
    result = invoke("emit", out / "plans.json", "-f", "sglang")
    assert result.exit_code == 0, result.output
    assert "memory fraction 0.95 is a vllm value" in result.stderr.replace("\n", " ")
    assert "--mem-fraction-static 0.95" not in result.stdout
