"""Bad input from a hostile-input sweep: Hugging Face configs, serving emits, calibration overlays.

Each case runs as a person would type it, through typer's CliRunner: a clear one-line error naming the file,
option or field, exit status 2, no traceback; or, for a plan that runs but the GPU cannot serve, a warning.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.inputs.modelspec import load_model
from tests.test_bad_input import assert_user_error, invoke

HF = Path(__file__).resolve().parent.parent / "autotune" / "data" / "hf_configs"
SERVE_PREDICT = ["-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "2048", "--output-len", "256", "-p", "tp=4"]
SERVE_STRING = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8"]


def hf_config(tmp_path: Path, name: str, **changes) -> Path:
    """A bundled config.json with ``changes`` (None deletes the key), written to its own folder."""
    from tests.test_bad_input_hf_config import mutated

    return mutated(tmp_path, HF / name, **changes)


# --- 1. Hugging Face config.json: 0 is not "absent" --------------------------------------------------------

@pytest.mark.parametrize("value", [0, -2, 3.5, "8"])
def test_zero_or_bad_key_value_heads_is_an_error_not_multi_head_attention(value, tmp_path):
    path = hf_config(tmp_path, "Qwen--Qwen3-30B-A3B.json", num_key_value_heads=value)
    assert_user_error(invoke("predict", "--workload", "serve", "-m", path, *SERVE_PREDICT),
                      "config.json", "num_key_value_heads")


def test_absent_key_value_heads_still_means_multi_head_attention(tmp_path):
    spec = load_model(str(hf_config(tmp_path, "Qwen--Qwen3-30B-A3B.json", num_key_value_heads=None)))
    assert spec.n_kv_heads == spec.n_heads == 32


def test_key_value_heads_must_divide_the_heads(tmp_path):
    path = hf_config(tmp_path, "Qwen--Qwen3-30B-A3B.json", num_key_value_heads=5)
    assert_user_error(invoke("predict", "--workload", "serve", "-m", path, *SERVE_PREDICT),
                      "config.json", "num_key_value_heads", "num_attention_heads=32")


@pytest.mark.parametrize("name, key", [
    ("deepseek-ai--DeepSeek-V3.json", "n_routed_experts"),  # DeepSeek-style: silently dense before
    ("Qwen--Qwen3-30B-A3B.json", "num_experts"),
    ("openai--gpt-oss-120b.json", "num_local_experts"),
])
def test_zero_experts_beside_a_top_k_contradicts_itself(name, key, tmp_path):
    path = hf_config(tmp_path, name, **{key: 0})
    assert_user_error(invoke("predict", "--workload", "serve", "-m", path, *SERVE_PREDICT),
                      "config.json", f"field '{key}'", "num_experts_per_tok=")


def test_zero_experts_with_zero_top_k_is_a_dense_model(tmp_path):
    spec = load_model(str(hf_config(tmp_path, "Qwen--Qwen3-30B-A3B.json", num_experts=0, num_experts_per_tok=0)))
    assert not spec.is_moe


@pytest.mark.parametrize("name, changes, field", [
    ("Qwen--Qwen3-30B-A3B.json", {"num_experts_per_tok": 200}, "num_experts_per_tok"),
    ("Qwen--Qwen3-30B-A3B.json", {"intermediate_size": 0}, "intermediate_size"),
    ("Qwen--Qwen3-30B-A3B.json", {"head_dim": 0}, "head_dim"),
    ("Qwen--Qwen3-30B-A3B.json", {"attention_dropout": -1}, "attention_dropout"),
    ("deepseek-ai--DeepSeek-V3.json", {"n_group": 0}, "n_group"),
    ("deepseek-ai--DeepSeek-V3.json", {"topk_group": 9}, "topk_group"),
    ("deepseek-ai--DeepSeek-V3.json", {"num_experts_per_tok": 0}, "num_experts_per_tok"),
])
def test_other_zero_or_contradictory_fields_name_the_field(name, changes, field, tmp_path):
    path = hf_config(tmp_path, name, **changes)
    assert_user_error(invoke("predict", "--workload", "serve", "-m", path, *SERVE_PREDICT),
                      "config.json", f"field '{field}'")


# --- 2. emit warns about a weight precision the GPU cannot run ---------------------------------------------

@pytest.mark.parametrize("args", [
    ["--format", "vllm", "tp=4,weights=fp4,max_batch=64", "-m", "llama3-70b", "-H", "a100-sxm4-80gb",
     "--checkpoint", "nvfp4"],  # an A100: no FP4 weight-only path planned before Hopper
    # SGLang runs FP8 dense layers weight-only on Ampere (Marlin), but not its FP8 MoE
    ["--format", "sglang", "tp=4,weights=fp8,max_batch=64", "-m", "mixtral-8x7b", "-H", "a100-sxm4-80gb"],
])
def test_emit_refuses_a_weight_precision_the_gpu_cannot_run_unless_allowed(args):
    """The engine would not load the weights: refused with the reason; --allow-no-fit writes it, and says so."""
    refused = invoke("emit", *args, "--gpus", "8", "--input-len", "2048", "--output-len", "256")
    assert refused.exit_code != 0 and "weight precision not supported by the GPU" in refused.output, refused.output
    assert "--allow-no-fit" in refused.output and "Traceback" not in refused.output
    result = invoke("emit", *args, "--gpus", "8", "--input-len", "2048", "--output-len", "256", "--allow-no-fit")
    assert result.exit_code == 0, result.output
    assert "warning:" in result.stderr and "weight precision not supported by the GPU" in result.stderr
    assert "WARNING: weight precision not supported by the GPU" in result.stdout  # the script says so too


@pytest.mark.parametrize("plan, checkpoint", [("tp=4,weights=fp8,kv=fp8,max_batch=64", "bf16"),
                                              ("tp=4,weights=fp4,max_batch=64", "nvfp4")])  # weight-only on Hopper
def test_emit_does_not_warn_about_a_precision_the_gpu_runs(plan, checkpoint):
    result = invoke("emit", "--format", "vllm", plan, "-m", "llama3-70b", "--checkpoint", checkpoint,
                    "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "2048", "--output-len", "256")
    assert result.exit_code == 0, result.output
    assert "warning" not in result.stderr.lower()


# --- 3. options that do not apply to a serving emit are refused, not ignored -------------------------------

@pytest.mark.parametrize("extra, flag", [
    (["-s", "100", "--input-len", "2048", "--output-len", "256"], "--seq-len"),
    (["--input-len", "2048", "--output-len", "256", "-b", "16"], "--global-batch"),
    (["--input-len", "2048", "--output-len", "256", "--tokens", "1e12"], "--tokens"),
    (["--input-len", "2048", "--output-len", "256", "--data-path", "/data"], "--data-path"),
    (["--input-len", "2048", "--output-len", "256", "--framework", "torchtitan"], "--framework"),
])
def test_serving_emit_refuses_training_options(extra, flag):
    assert_user_error(invoke("emit", "--format", "vllm", "tp=1", *SERVE_STRING, *extra), flag, "does not apply")


def test_serving_emit_refuses_calibration():
    assert_user_error(invoke("emit", "--format", "sglang", "tp=1", *SERVE_STRING, "--input-len", "2048",
                             "--output-len", "256", "--calibration", "x.yaml"), "--calibration", "does not apply")


def test_seq_len_with_one_length_gives_the_other():
    result = invoke("emit", "--format", "vllm", "tp=1,max_batch=8", *SERVE_STRING, "-s", "2304", "--input-len", "2048",
                    "--json")
    assert result.exit_code == 0, result.output
    assert "--max-model-len 3072" in json.loads(result.stdout)["files"]["serve_vllm.sh"]  # 2048 + 256, with slack
    assert_user_error(invoke("emit", "--format", "vllm", "tp=1", *SERVE_STRING, "-s", "100", "--input-len", "2048"),
                      "--seq-len", "seq_len=100", "input_len=2048")


def test_training_emit_refuses_serving_options():
    assert_user_error(invoke("emit", "--format", "megatron", "tp=8", *SERVE_STRING, "-s", "4096", "-b", "16",
                             "--input-len", "2048"), "--input-len", "does not apply")


# --- 4. what a plans.json holds comes from it ----------------------------------------------------------------

@pytest.fixture(scope="module")
def serving_plans(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serve") / "run"
    result = invoke("search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2",
                    "--input-len", "512", "--output-len", "128", "--out", out, "--json")
    assert result.exit_code == 0, result.output
    return out / "plans.json"


@pytest.fixture(scope="module")
def training_plans(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("train") / "run"
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16",
                    "--out", out, "--json")
    assert result.exit_code == 0, result.output
    return out / "plans.json"


@pytest.mark.parametrize("extra, flag", [
    (["-m", "llama3-70b"], "--model"),  # re-planned the other model silently before
    (["-m", "llama3-8b"], "--model"),
    (["--gpus-per-node", "4"], "--gpus-per-node"),
    (["--gpus", "8"], "--gpus"),
])
def test_serving_plans_refuse_what_they_hold(serving_plans, extra, flag):
    assert_user_error(invoke("emit", serving_plans, "--format", "vllm", *extra), flag, "comes from", "plans.json")


def test_training_plans_refuse_another_model(training_plans):
    assert_user_error(invoke("emit", training_plans, "--format", "megatron", "-m", "llama3-70b"),
                      "--model", "comes from", "plans.json")


def test_plans_without_an_embedded_spec_take_the_searched_model_only(serving_plans, tmp_path):
    document = json.loads(serving_plans.read_text())
    del document["inputs"]["model_spec"]  # an older plans.json: names only
    older = tmp_path / "plans.json"
    older.write_text(json.dumps(document))
    assert invoke("emit", older, "--format", "vllm", "-m", "llama3-8b").exit_code == 0
    assert_user_error(invoke("emit", older, "--format", "vllm", "-m", "llama3-70b"),
                      "--model", "llama3-8b", "llama3-70b")


# --- 6. calibration overlays: exponent numbers read as numbers; duplicate keys refused ----------------------

SERVE_PREDICT_8B = ["predict", "--workload", "serve", *SERVE_STRING, "--input-len", "512", "--output-len", "128",
                    "-p", "tp=1"]
TRAIN_PREDICT_8B = ["predict", *SERVE_STRING, "-s", "4096", "-b", "16", "-p", "tp=2"]  # a plan that fits: exit 0


@pytest.mark.parametrize("value", ["6e-1", "6.0e-1", "60e-2", ".6e0"])
def test_exponent_numbers_in_a_serving_overlay_are_numbers(value, tmp_path):
    path = tmp_path / "serving.yaml"
    path.write_text(f"schema: serving\nengines:\n  vllm:\n    gemm: {value}\n")
    result = invoke(*SERVE_PREDICT_8B, "--calibration", path)
    assert result.exit_code == 0, result.output


def test_exponent_numbers_in_a_training_overlay_are_numbers(tmp_path):
    path = tmp_path / "calib.yaml"
    path.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: 6e-1}\n")
    result = invoke(*TRAIN_PREDICT_8B, "--calibration", path)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["'6e-1'", "fast", "nan", ".nan", ".inf", "1e999", "1e308"])
def test_non_numbers_and_non_finite_numbers_stay_refused(value, tmp_path):
    path = tmp_path / "serving.yaml"
    path.write_text(f"schema: serving\nengines:\n  vllm:\n    gemm: {value}\n")
    assert_user_error(invoke(*SERVE_PREDICT_8B, "--calibration", path), "serving.yaml", "engines.vllm.gemm")


def test_a_duplicate_engine_is_refused_naming_the_key(tmp_path):
    path = tmp_path / "serving.yaml"
    path.write_text("schema: serving\nengines:\n  vllm:\n    gemm: 0.6\n  vllm:\n    gemm: 0.7\n")
    assert_user_error(invoke(*SERVE_PREDICT_8B, "--calibration", path), "serving.yaml", "engines.vllm", "twice",
                      "line 5")


def test_a_duplicate_key_in_a_training_overlay_is_refused(tmp_path):
    path = tmp_path / "calib.yaml"
    path.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: 0.6, gemm: 0.5}\n")
    assert_user_error(invoke(*TRAIN_PREDICT_8B, "--calibration", path), "calib.yaml",
                      "hardware.h100-sxm5-80gb.efficiency.gemm", "twice")


def test_every_yaml_input_refuses_a_key_held_twice(tmp_path):
    """Model specs, hardware profiles and search spaces are read by the same strict reader as overlays."""
    path = tmp_path / "model.yaml"
    text = "name: tiny\nn_layers: 4\nhidden_size: 1024\nn_layers: 8\nffn_hidden_size: 2816\nn_heads: 8\n" \
           "n_kv_heads: 8\nvocab_size: 32000\n"
    path.write_text(text)
    assert_user_error(invoke("predict", "-m", path, "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "2048", "-b", "8",
                             "-p", "tp=1"), "model.yaml", "n_layers", "twice")


@pytest.mark.parametrize("command, name, needle", [
    ("hardware", "", "must not be empty"), ("hardware", "no-such-gpu", "unknown hardware"),
    ("models", " ", "must not be empty"), ("models", "no-such-model", "no-such-model")])
def test_show_names_its_argument_not_the_search_flag(command, name, needle):
    """`hardware show NAME` and `models show NAME` take the name as an argument: the error names NAME, not the
    --hardware / --model flag of search and predict."""
    result = invoke(command, "show", name)
    assert_user_error(result, "field 'NAME'", needle)
    assert "--hardware" not in result.stderr and "--model'" not in result.stderr
