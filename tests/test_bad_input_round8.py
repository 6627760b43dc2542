"""Hostile inputs, round 8: serving-runs cells that were read and then ignored, or read as nonsense.

Each case runs as a person would type it, through typer's CliRunner; each failed on the code before its fix:
ep, attention_dp and replicas were never read (a row of ep=8 was predicted as one TP engine), a hidden size that
the heads do not divide rounded the head size down, and 1e15 GPUs or one request in 1e300 s passed.
"""

from __future__ import annotations

import csv
import json

import pytest

from tests.test_bad_input import assert_user_error, invoke
from tests.test_bad_input_round7 import RUNS_HEADER, RUNS_ROW

HEADER = RUNS_HEADER + ["ep", "replicas", "attention_dp"]


def runs_csv(tmp_path, changes: dict):
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=HEADER)
        writer.writeheader()
        writer.writerow({**dict(zip(RUNS_HEADER, RUNS_ROW)), "ep": "", "replicas": "1", "attention_dp": "", **changes})
    return path


def validated(path) -> dict:
    result = invoke("validate", path, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_row_as_written_is_predicted(tmp_path):
    report = validated(runs_csv(tmp_path, {}))
    assert [row["id"] for row in report["rows"]] == ["bad"]


@pytest.mark.parametrize("changes, needle", [
    ({"ep": "8"}, "expert parallelism (ep=8)"),
    ({"attention_dp": "8"}, "attention data parallelism (attention_dp=8)"),
    ({"replicas": "2", "n_gpus": "16"}, "several replicas (replicas=2)"),
    ({"hidden_size": "8193"}, "hidden_size 8193 is not divisible by n_heads 64"),
], ids=["ep", "attention-dp", "replicas", "head-size"])
def test_a_layout_or_shape_the_runs_validation_cannot_express_is_skipped_with_its_reason(changes, needle, tmp_path):
    report = validated(runs_csv(tmp_path, changes))
    assert report["rows"] == []
    assert [s["id"] for s in report["skipped"]] == ["bad"], report["skipped"]
    assert needle in report["skipped"][0]["reason"], report["skipped"][0]


@pytest.mark.parametrize("changes, field, needle", [
    ({"n_gpus": "1e15"}, "n_gpus", "n_gpus <= 10,000,000 must hold"),
    ({"tp": "1e9", "n_gpus": ""}, "tp", "tp <= 10,000,000 must hold"),
    ({"ep": "0"}, "ep", "ep >= 1 must hold"),
    ({"replicas": "-2"}, "replicas", "replicas >= 1 must hold"),
    ({"request_rate": "1e-300"}, "request_rate", "request_rate >= 0.001 must hold"),
], ids=["gpus", "tp", "zero-ep", "negative-replicas", "vanishing-rate"])
def test_a_count_or_rate_that_is_a_unit_slip_is_refused(changes, field, needle, tmp_path):
    path = runs_csv(tmp_path, changes)
    assert_user_error(invoke("validate", path), str(path), f"field '{field}'", "row 'bad'", needle)


def test_an_ep_or_replicas_of_one_is_the_layout_as_written(tmp_path):
    report = validated(runs_csv(tmp_path, {"ep": "1", "attention_dp": "1", "replicas": "1"}))
    assert [row["id"] for row in report["rows"]] == ["bad"]


# --- a search-space value is shown as YAML writes it, not as Python's repr ------------------------------------

@pytest.mark.parametrize("axis, shown", [
    ("tp: {a: 1}", "must be a non-empty list, but got {a: 1}"),  # was {'a': 1}
    ("tp: [null]", "(tp='null')"),  # was (tp='None')
    ("tp: [.nan]", "(tp='.nan')"),  # was (tp='nan')
])
def test_a_space_error_shows_the_value_as_yaml_writes_it(axis, shown, tmp_path):
    space = tmp_path / "space.yaml"
    space.write_text(f"axes:\n  {axis}\n")
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "8192", "-b", "64",
                    "--space", space)
    assert_user_error(result, str(space), "field 'axes.tp'", shown)


# --- config.json fields autotune does not read must still be what transformers writes ---------------------------

from tests.test_bad_input_hf_config import LLAMA, DEEPSEEK, mutated, refused  # noqa: E402

from autotune.inputs.modelspec import load_model  # noqa: E402


@pytest.mark.parametrize("changes, field", [
    ({"torch_dtype": "float128"}, "torch_dtype"),
    ({"torch_dtype": 16}, "torch_dtype"),
    ({"dtype": "bf16x"}, "dtype"),
    ({"architectures": "LlamaForCausalLM"}, "architectures"),
    ({"architectures": [3]}, "architectures"),
    ({"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": 0}}, "quantization_config.group_size"),
    ({"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": "128"}},
     "quantization_config.group_size"),
], ids=["float128", "dtype-number", "new-key", "architectures-string", "architectures-number", "group-zero",
        "group-text"])
def test_a_config_field_the_engine_would_refuse_is_refused(changes, field, tmp_path):
    refused(tmp_path, LLAMA, f"field '{field}'", **changes)


@pytest.mark.parametrize("changes", [
    {"torch_dtype": "torch.bfloat16"}, {"dtype": "float16"}, {"torch_dtype": "auto"}, {"architectures": []},
    {"quantization_config": {"quant_method": "gptq", "bits": 4, "group_size": -1}},
    {"quantization_config": {"quant_method": "awq", "bits": 4, "group_size": 128}},
], ids=["torch-prefix", "dtype", "auto", "no-architectures", "per-channel", "group-128"])
def test_the_values_transformers_writes_still_load(changes, tmp_path):
    assert load_model(str(mutated(tmp_path, LLAMA, **changes))).n_layers == 32


def test_the_deepseek_config_as_published_still_loads(tmp_path):
    assert load_model(str(mutated(tmp_path, DEEPSEEK))).is_moe


# --- a whole file of another kind is named as such, not listed key by key -----------------------------------------

@pytest.mark.parametrize("args, given, kind, goes", [
    (["models", "show", "profiles/hardware/h100-sxm5-80gb.yaml"], "h100-sxm5-80gb.yaml", "is a hardware profile",
     "--hardware"),
    (["hardware", "show", "profiles/models/deepseek-v3.yaml"], "deepseek-v3.yaml", "is a model spec", "--model"),
    (["models", "show", "search_spaces/train.yaml"], "train.yaml", "is a search space", "--space"),
    (["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "8192", "-b", "64", "--space",
      "profiles/models/deepseek-v3.yaml"], "deepseek-v3.yaml", "is a model spec", "--model"),
], ids=["hardware-as-model", "model-as-hardware", "space-as-model", "model-as-space"])
def test_a_file_of_another_kind_is_named_as_such(args, given, kind, goes):
    from tests.test_bad_input import ROOT

    args = [str(ROOT / a) if a.endswith(".yaml") else a for a in args]
    assert_user_error(invoke(*args), given, kind, f"give it to {goes}")


def test_a_typo_in_a_spec_is_still_listed_with_the_allowed_keys(tmp_path):
    spec = tmp_path / "spec.yaml"
    from tests.test_bad_input import ROOT

    spec.write_text((ROOT / "profiles/models/deepseek-v3.yaml").read_text() + "n_layerz: 3\n")
    assert_user_error(invoke("models", "show", spec), "unknown key(s) n_layerz", "allowed:")


def test_every_torch_dtype_name_still_loads(tmp_path):
    """A review found the first list refused real torch dtypes (int32, float8_e8m0fnu)."""
    for dtype in ("int32", "float8_e8m0fnu", "float4_e2m1fn_x2", "half"):
        assert load_model(str(mutated(tmp_path, LLAMA, torch_dtype=dtype))).n_layers == 32


def test_a_missing_profile_path_with_a_comma_is_not_found_not_a_list(tmp_path):
    """A comma in a path is not a list of profiles: the list message is kept for bundled names."""
    missing = tmp_path / "my,gpu.yaml"
    assert_user_error(invoke("hardware", "show", missing), "file not found")
    assert_user_error(invoke("hardware", "show", "h100-sxm5-80gb,a100-sxm4-80gb"), "takes one hardware profile")
