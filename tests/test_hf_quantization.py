"""A Hugging Face config.json that states its quantization plans that checkpoint: an FP8 DeepSeek-V3, gpt-oss's
MXFP4 and Kimi K2.5's int4 are not planned as bf16 weights (twice or four times their size)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.inputs.hf_config import quantized_checkpoint
from autotune.serving.checkpoint import default_checkpoint

DATA = Path(__file__).resolve().parent.parent / "autotune" / "data" / "hf_configs"


@pytest.mark.parametrize("quant, checkpoint", [
    ({"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128]}, "fp8"),
    ({"quant_method": "mxfp4"}, "mxfp4"),
    ({"quant_method": "gptq", "bits": 4}, "gptq"),
    ({"quant_method": "gptq", "bits": 3}, None),
    ({"quant_method": "awq"}, "awq"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int"}}}}, "compressed-tensors:int4"),
    ({"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"}}}}, "compressed-tensors:fp8"),
    ({"quant_method": "modelopt", "quant_algo": "NVFP4"}, "modelopt:fp4"),
    ({"quant_method": "bitsandbytes"}, None),
    (None, None),
])
def test_quantization_config_names_the_checkpoint(quant, checkpoint):
    assert quantized_checkpoint({} if quant is None else {"quantization_config": quant}) == checkpoint
    assert quantized_checkpoint({"text_config": {"quantization_config": quant}}) == checkpoint


def test_bundled_configs_read_as_their_checkpoints():
    assert default_checkpoint(str(DATA / "deepseek-ai--DeepSeek-V3.json")) == "fp8"
    assert default_checkpoint(str(DATA / "openai--gpt-oss-120b.json")) == "mxfp4"


def test_predict_on_an_fp8_config_plans_fp8_weights_unless_told(tmp_path):
    path = tmp_path / "config.json"
    path.write_text((DATA / "deepseek-ai--DeepSeek-V3.json").read_text(), encoding="utf-8")
    base = ["predict", "--workload", "serve", "--model", str(path), "--hardware", "h200-sxm-141gb", "--gpus", "8",
            "--input-len", "1000", "--output-len", "200", "--plan", "tp=8", "--json"]
    for folder_or_file in (str(path), str(tmp_path)):
        args = [*base[:4], folder_or_file, *base[5:]]
        fp8 = CliRunner().invoke(app, args)
        assert fp8.exit_code == 0, fp8.output
        assert json.loads(fp8.stdout)["plan"]["weights"] == "fp8"
    told = CliRunner().invoke(app, [*base, "--checkpoint", "bf16"])
    assert told.exit_code == 1, told.output  # a plan that does not fit: exit 1, its JSON printed
    assert json.loads(told.stdout)["plan"]["weights"] == "bf16"  # the user's word wins (and does not fit: 1.3 TB)


@pytest.mark.parametrize("quant, field", [
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": [4]}}}},
     "quantization_config.config_groups.g.weights.num_bits"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": "int4"}}, "quantization_config.config_groups.g"),
    ({"quant_method": "compressed-tensors", "config_groups": [1]}, "quantization_config.config_groups"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 4, "type": 1}}}},
     "quantization_config.config_groups.g.weights.type"),
    ("fp8", "quantization_config"),
    ({"quant_method": 5}, "quantization_config.quant_method"),
    ({"quant_method": "gptq", "bits": "4"}, "quantization_config.bits"),
    ({"quant_method": "awq", "bits": [4]}, "quantization_config.bits"),
    ({"quant_method": "modelopt", "quant_algo": ["FP8"]}, "quantization_config.quant_algo"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": -4}}}},
     "quantization_config.config_groups.g.weights.num_bits"),
    ({"quant_method": "compressed-tensors", "config_groups": {"g": {"weights": {"num_bits": 10**30}}}},
     "quantization_config.config_groups.g.weights.num_bits"),
])
def test_a_malformed_quantization_config_is_refused_naming_the_field(tmp_path, quant, field):
    path = tmp_path / "config.json"
    config = json.loads((DATA / "Qwen--Qwen3-30B-A3B.json").read_text())
    path.write_text(json.dumps({**config, "quantization_config": quant}), encoding="utf-8")
    result = CliRunner().invoke(app, ["predict", "--workload", "serve", "--model", str(path), "--hardware",
                                      "h100-sxm5-80gb", "--gpus", "8", "--input-len", "1000", "--output-len", "200",
                                      "--plan", "tp=8"])
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert field in " ".join(result.output.split()) and "config.json" in result.output


@pytest.mark.parametrize("quant, said", [
    ({"quant_method": "bitsandbytes"}, "'bitsandbytes'"),
    ({"quant_method": "gptq", "bits": 8}, "8-bit weights"),
    ({"load_in_4bit": True}, "no quant_method"),
    ({"quant_method": "compressed-tensors", "config_groups": {
        "a": {"weights": {"num_bits": 4, "type": "int"}}, "b": {"weights": {"num_bits": 8, "type": "float"}}}},
     "mixed schemes"),
    ({"quant_method": "modelopt", "quant_algo": "W4A8_AWQ"}, "W4A8_AWQ"),
])
def test_a_quantization_autotune_does_not_plan_is_said_not_silently_bf16(tmp_path, quant, said):
    path = tmp_path / "config.json"
    config = json.loads((DATA / "Qwen--Qwen3-30B-A3B.json").read_text())
    path.write_text(json.dumps({**config, "quantization_config": quant}), encoding="utf-8")
    base = ["predict", "--workload", "serve", "--model", str(path), "--hardware", "h100-sxm5-80gb", "--gpus", "8",
            "--input-len", "1000", "--output-len", "200", "--plan", "tp=8"]
    result = CliRunner().invoke(app, base)
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "note:" in text and said in text and "--checkpoint" in text
    told = CliRunner().invoke(app, [*base, "--checkpoint", "bf16"])
    assert told.exit_code == 0 and "note:" not in told.output
    as_json = CliRunner().invoke(app, [*base, "--json"])
    assert as_json.exit_code == 0 and said in json.loads(as_json.stdout)["checkpoint_note"]


def test_a_modelopt_checkpoint_folder_reads_hf_quant_config_beside_config_json(tmp_path):
    """NVIDIA's -NVFP4 checkpoints state the scheme in hf_quant_config.json, not in config.json."""
    config = json.loads((DATA / "deepseek-ai--DeepSeek-V3.json").read_text())
    config.pop("quantization_config")
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}),
        encoding="utf-8")
    assert default_checkpoint(str(tmp_path)) == "modelopt:fp4"
    assert default_checkpoint(str(tmp_path / "config.json")) == "modelopt:fp4"
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "FP8"}}),
                                                   encoding="utf-8")
    assert default_checkpoint(str(tmp_path)) == "modelopt:fp8"


def test_a_kv_cache_only_modelopt_checkpoint_is_bf16_weights_without_a_note(tmp_path):
    config = json.loads((DATA / "Qwen--Qwen3-30B-A3B.json").read_text())
    (tmp_path / "config.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "hf_quant_config.json").write_text(json.dumps(
        {"quantization": {"quant_algo": None, "kv_cache_quant_algo": "FP8"}}), encoding="utf-8")
    result = CliRunner().invoke(app, ["predict", "--workload", "serve", "--model", str(tmp_path), "--hardware",
                                      "h100-sxm5-80gb", "--gpus", "8", "--input-len", "1000", "--output-len", "200",
                                      "--plan", "tp=8", "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"]["weights"] == "bf16" and "note:" not in result.output



@pytest.mark.parametrize("config_name, sidecar_name", [
    ("nvidia--DeepSeek-V3.1-NVFP4.json", "nvidia--DeepSeek-V3.1-NVFP4.hf_quant_config.json"),  # the shared data's copies
    ("nvidia--DeepSeek-V3.1-NVFP4_config.json", "nvidia--DeepSeek-V3.1-NVFP4_hf_quant_config.json"),  # AIConfigurator's
    ("ds.json", "ds_hf_quant_config.json"),
])
def test_a_copied_config_reads_the_modelopt_sidecar_named_after_it(tmp_path, config_name, sidecar_name):
    """A config copied out of its checkpoint folder keeps its hf_quant_config.json by name; read as bf16 it planned
    an NVFP4 DeepSeek at four times its weights (156 GiB per GPU on TP8 instead of 46)."""
    config = json.loads((DATA / "deepseek-ai--DeepSeek-V3.json").read_text())
    config.pop("quantization_config")
    (tmp_path / config_name).write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / sidecar_name).write_text(json.dumps(
        {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4", "kv_cache_quant_algo": "FP8"}}),
        encoding="utf-8")
    assert default_checkpoint(str(tmp_path / config_name)) == "modelopt:fp4"
    args = ["predict", "--workload", "serve", "-H", "b200", "--gpus", "8", "-p", "tp=8", "--input-len", "1024",
            "--output-len", "1024", "--concurrency", "64", "--json"]
    by_file = CliRunner().invoke(app, [*args, "-m", str(tmp_path / config_name)])
    by_id = CliRunner().invoke(app, [*args, "-m", "nvidia/DeepSeek-V3.1-NVFP4"])
    assert by_file.exit_code == 0 and by_id.exit_code == 0, by_file.output + by_id.output
    a, b = json.loads(by_file.stdout), json.loads(by_id.stdout)
    assert a["plan"]["weights"] == "fp4" and a["estimate"]["weights_from"] == "checkpoint"
    assert a["estimate"]["memory_breakdown_gib"]["weights"] == pytest.approx(b["estimate"]["memory_breakdown_gib"]["weights"])
    assert a["estimate"]["tpot_ms"] == pytest.approx(b["estimate"]["tpot_ms"])


def test_another_configs_sidecar_is_not_read(tmp_path):
    config = json.loads((DATA / "Qwen--Qwen3-30B-A3B.json").read_text())
    (tmp_path / "qwen.json").write_text(json.dumps(config), encoding="utf-8")
    (tmp_path / "ds.hf_quant_config.json").write_text(json.dumps({"quantization": {"quant_algo": "NVFP4"}}),
                                                      encoding="utf-8")
    assert default_checkpoint(str(tmp_path / "qwen.json")) == "bf16"
