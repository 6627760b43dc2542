"""Round 13 of the hostile-input sweep: capacity lists, benchmark results, gpt-oss configs and remedies' numbers."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "autotune" / "data" / "hf_configs"
CAPACITY = ["-m", "llama3-8b", "--gpus", "8..16", "-s", "4096", "-b", "64", "--tokens", "1e11"]


@pytest.mark.parametrize("hardware", [
    "b200,b200-sxm-180gb",    # an alias beside the name it stands for
    "gb200,gb200-nvl72",
    "{profile},h100-sxm5-80gb",  # the bundled profile's own file beside its name
])
def test_a_capacity_list_naming_one_profile_twice_is_refused(hardware):
    """`-H b200,b200-sxm-180gb` searched the same GPU twice and listed every row twice; only the same name typed
    twice ('h100,h100') was refused."""
    hardware = hardware.format(profile=ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml")
    result = CliRunner().invoke(app, ["search", "-H", hardware, *CAPACITY])
    assert result.exit_code == 2, result.output
    assert "field '--hardware'" in result.output and "each profile may appear once" in result.output
    assert "drop one of them" in result.output and "Traceback" not in result.output


def test_a_capacity_list_of_an_edited_copy_beside_its_bundled_profile_is_still_searched(tmp_path):
    """A copy with other figures is another GPU (the note says it is planned as the file says): both are kept."""
    text = (ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text().replace("memory_gib: 79.1", "memory_gib: 96")
    edited = tmp_path / "h100-96.yaml"
    edited.write_text(text)
    result = CliRunner().invoke(app, ["search", "-H", f"{edited},h100-sxm5-80gb", *CAPACITY])
    assert result.exit_code == 0, result.output
    assert "each profile may appear once" not in result.output


def _bench(tmp_path: Path, line: str) -> list[str]:
    script = tmp_path / "bench.py"
    script.write_text(f"print({line!r})\n")
    return [sys.executable, str(script)]


@pytest.mark.parametrize("line", [
    '{"oom": "no", "tokens_per_s_per_gpu": 3000}',   # was recorded as a measurement of 3,000 tokens/s/GPU
    '{"oom": "true", "tokens_per_s_per_gpu": 3000}',  # likewise, though it says the run ran out of memory
    '{"oom": 1}',                                     # was failed for a missing throughput
])
def test_a_benchmark_oom_that_is_not_a_json_boolean_fails_the_trial_naming_it(tmp_path, line):
    from autotune.search.tune import run_benchmark

    measured = run_benchmark(_bench(tmp_path, line), {"tp": 1}, timeout_s=30)
    assert measured.status == "failed", measured
    assert "oom must be true or false" in measured.reason and "but got" in measured.reason


@pytest.mark.parametrize("line, status", [
    ('{"oom": true}', "infeasible"),
    ('{"oom": false, "tokens_per_s_per_gpu": 3000}', "ok"),
    ('{"oom": null, "tokens_per_s_per_gpu": 3000}', "ok"),
])
def test_a_benchmark_oom_boolean_is_still_read(tmp_path, line, status):
    from autotune.search.tune import run_benchmark

    assert run_benchmark(_bench(tmp_path, line), {"tp": 1}, timeout_s=30).status == status


def _gpt_oss(tmp_path: Path, **fields) -> Path:
    config = json.loads((HF / "openai--gpt-oss-120b.json").read_text())
    config.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("value, says", [
    (8, "must equal num_experts_per_tok"),  # 4 routed per token is what num_experts_per_tok states
    (0, "must equal num_experts_per_tok"),
    ("abc", "must be an integer"),
    (1e30, "must be an integer"),
])
def test_a_gpt_oss_experts_per_token_that_disagrees_is_refused(tmp_path, value, says):
    """gpt-oss states its top-k twice; an edit to experts_per_token was ignored and num_experts_per_tok planned."""
    path = _gpt_oss(tmp_path, experts_per_token=value)
    serve = ["search", "--workload", "serve", "-m", str(path), "-H", "h200-sxm-141gb", "--gpus", "8",
             "--input-len", "512", "--output-len", "128"]
    for command in (["models", "show", str(path)], serve):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert "config.json" in result.output and "field 'experts_per_token'" in result.output
        assert says in result.output and "Traceback" not in result.output


@pytest.mark.parametrize("fields", [{"experts_per_token": 4}, {"experts_per_token": None}])
def test_a_gpt_oss_config_whose_top_k_agrees_or_is_left_out_is_read(tmp_path, fields):
    result = CliRunner().invoke(app, ["models", "show", str(_gpt_oss(tmp_path, **fields))])
    assert result.exit_code == 0, result.output


def test_a_remedy_below_one_token_per_second_is_not_written_as_zero(tmp_path):
    """A model of 100,000 layers fits on 4,096 GPUs at a fraction of a token/s/GPU; the remedy said 'best 0'."""
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "Meta-Llama-3-8B" / "config.json").read_text())
    config["num_hidden_layers"] = 100_000
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["search", "-m", str(path), "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096",
                                      "-b", "16"])
    assert result.exit_code == 1, result.output
    assert "more GPUs (--gpus" in result.output and "fits, best 0 tokens" not in result.output
    assert "Traceback" not in result.output


def test_remedy_rates_keep_two_digits_below_ten():
    from autotune.search.diagnose import _rate

    assert _rate(0.1234) == "0.12" and _rate(3.456) == "3.5" and _rate(9_229.4) == "9,229"


@pytest.mark.parametrize("value", ["false", "true", 0, 1])
def test_a_minimax_use_mtp_that_is_not_a_boolean_is_refused(tmp_path, value):
    """`"use_mtp": "false"` was truthy and planned the MTP modules it meant to leave out."""
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "MiniMax-M2.5" / "config.json").read_text())
    config["use_mtp"] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["models", "show", str(path)])
    assert result.exit_code == 2, result.output
    assert "config.json" in result.output and "field 'use_mtp'" in result.output and "true or false" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("value, layers", [(True, 3), (False, 0), (None, 0)])
def test_a_minimax_use_mtp_boolean_or_null_is_read(tmp_path, value, layers):
    from autotune.inputs.modelspec import load_model

    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "MiniMax-M2.5" / "config.json").read_text())
    config["use_mtp"] = value
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    assert load_model(str(path)).mtp_layers == layers


@pytest.mark.parametrize("fields, field", [
    ({"use_qk_norm": "true"}, "use_qk_norm"),            # a string was read as no QK norm at all
    ({"qk_norm_type": "per_token"}, "qk_norm_type"),     # neither kind: likewise dropped
    ({"use_routing_bias": "yes"}, "use_routing_bias"),
])
def test_a_minimax_qk_norm_or_routing_bias_that_is_not_what_hf_takes_is_refused(tmp_path, fields, field):
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "MiniMax-M2.5" / "config.json").read_text())
    config.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    result = CliRunner().invoke(app, ["models", "show", str(path)])
    assert result.exit_code == 2, result.output
    assert "config.json" in result.output and f"field '{field}'" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("fields, per_layer, per_head", [
    ({}, True, False),                                        # the published config: per_layer
    ({"qk_norm_type": "per_head"}, False, True),
    ({"qk_norm_type": None}, False, True),                    # HF's default kind
    ({"use_qk_norm": False, "qk_norm_type": "anything"}, False, False),  # no norm: its kind is not read
])
def test_a_minimax_qk_norm_as_hf_writes_it_is_read(tmp_path, fields, per_layer, per_head):
    from autotune.inputs.modelspec import load_model

    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "MiniMax-M2.5" / "config.json").read_text())
    config.update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    spec = load_model(str(path))
    assert spec.qk_norm_per_layer is per_layer and spec.qk_layernorm is per_head
