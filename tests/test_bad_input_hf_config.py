"""Bad input from a hostile-input sweep: Hugging Face config.json files and hardware profiles.

Each case runs as a person would type it, through typer's CliRunner, on a mutated copy of a bundled file: one
line on stderr naming the file and the key as the file spells it, exit status 2, no traceback.  Before, each of
these exited 0 (a DeepSeek-V3 with no MoE layer became a dense model, an unknown activation became SwiGLU, a
string rope_scaling was ignored, a petabyte of GPU memory was planned on) or, for a billion layers, took half a
minute and gigabytes before failing on the spec's field name.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from autotune.inputs.hardware import hardware_names
from autotune.inputs.modelspec import load_model
from tests.test_bad_input import assert_user_error, invoke

ROOT = Path(__file__).resolve().parent.parent
BUNDLED = ROOT / "autotune" / "data" / "hf_configs"
TEST_CONFIGS = ROOT / "tests" / "data" / "hf_configs"
SHARED = ROOT.parent / "shared" / "data" / "hf_configs"
DEEPSEEK = BUNDLED / "deepseek-ai--DeepSeek-V3.json"
QWEN_MOE = BUNDLED / "Qwen--Qwen3-30B-A3B.json"
GPT_OSS = BUNDLED / "openai--gpt-oss-120b.json"
LLAMA = TEST_CONFIGS / "Meta-Llama-3-8B" / "config.json"
MIXTRAL = TEST_CONFIGS / "Mixtral-8x7B-v0.1" / "config.json"
PROFILE = ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml"
CONFIGS = {"deepseek": DEEPSEEK, "qwen-moe": QWEN_MOE, "gpt-oss": GPT_OSS, "llama": LLAMA, "mixtral": MIXTRAL}


def mutated(tmp_path: Path, original: Path, **changes) -> Path:
    """A copy of ``original`` with ``changes`` (None deletes the key), as ``<tmp>/model/config.json``."""
    config = json.loads(original.read_text())
    for key, value in changes.items():
        if value is None:
            config.pop(key, None)
        else:
            config[key] = value
    folder = tmp_path / "model"
    folder.mkdir(exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(config))
    return path


def refused(tmp_path: Path, original: Path, *needles: str, **changes) -> None:
    path = mutated(tmp_path, original, **changes)
    assert_user_error(invoke("models", "show", path), str(path), *needles)


# --- 1. MoE keys must agree: no silent dense model ----------------------------------------------------------

def test_first_k_dense_replace_beyond_the_layers_is_refused_not_a_dense_model(tmp_path):
    refused(tmp_path, DEEPSEEK, "field 'first_k_dense_replace'", "first_k_dense_replace=100", "num_hidden_layers=61",
            "n_routed_experts to 0", first_k_dense_replace=100)


def test_first_k_dense_replace_equal_to_the_layers_is_refused(tmp_path):
    refused(tmp_path, DEEPSEEK, "field 'first_k_dense_replace'", first_k_dense_replace=61)


def test_first_k_dense_replace_below_the_layers_still_loads(tmp_path):
    spec = load_model(str(mutated(tmp_path, DEEPSEEK, first_k_dense_replace=60)))
    assert spec.is_moe and spec.moe.first_dense_layers == 60 and spec.n_moe_layers == 1


@pytest.mark.parametrize("original, changes, field", [
    (DEEPSEEK, {"moe_layer_freq": 100}, "moe_layer_freq"),  # layer 0 is dense (first_k_dense_replace 3), 100 > 60
    (DEEPSEEK, {"n_group": 7}, "n_group"),  # 256 experts in 7 equal groups
    (DEEPSEEK, {"num_experts_per_tok": 200}, "num_experts_per_tok"),  # > 4 groups of 32
    (DEEPSEEK, {"topk_group": 1, "num_experts_per_tok": 33}, "num_experts_per_tok"),
    (DEEPSEEK, {"n_routed_experts": -1}, "n_routed_experts"),
    (DEEPSEEK, {"num_experts_per_tok": -1}, "num_experts_per_tok"),
    (DEEPSEEK, {"n_shared_experts": -1}, "n_shared_experts"),
    (QWEN_MOE, {"num_experts": -4}, "num_experts"),
    (QWEN_MOE, {"num_experts_per_tok": 0}, "num_experts_per_tok"),
    (QWEN_MOE, {"num_experts_per_tok": 129}, "num_experts_per_tok"),
    (QWEN_MOE, {"decoder_sparse_step": 49}, "decoder_sparse_step"),  # no layer i with (i + 1) % 49 == 0
    (QWEN_MOE, {"mlp_only_layers": list(range(48))}, "mlp_only_layers"),  # every layer dense
    (QWEN_MOE, {"mlp_only_layers": [0, 99]}, "mlp_only_layers"),  # no layer 99
    (QWEN_MOE, {"mlp_only_layers": [0, "1"]}, "mlp_only_layers"),
    (QWEN_MOE, {"mlp_only_layers": "0,1"}, "mlp_only_layers"),
    (GPT_OSS, {"num_local_experts": -1}, "num_local_experts"),
    (MIXTRAL, {"num_experts_per_tok": 9}, "num_experts_per_tok"),
])
def test_incoherent_moe_keys_name_the_key(original, changes, field, tmp_path):
    refused(tmp_path, original, f"field '{field}'", **changes)


def test_a_moe_layout_that_leaves_no_moe_layer_says_how_to_write_a_dense_model(tmp_path):
    refused(tmp_path, QWEN_MOE, "leaves no MoE layer", "num_experts to 0", decoder_sparse_step=49)
    refused(tmp_path, DEEPSEEK, "leaves no MoE layer", "n_routed_experts to 0", moe_layer_freq=100)


# --- 2. an activation the code does not know -----------------------------------------------------------------

@pytest.mark.parametrize("name", ["llama", "mixtral", "qwen-moe"])
@pytest.mark.parametrize("value", ["tanh_weird", "SiLU", "", 5, ["silu"]])
def test_an_unknown_activation_is_refused_listing_the_known_ones(name, value, tmp_path):
    refused(tmp_path, CONFIGS[name], "field 'hidden_act'", "silu", "gelu_pytorch_tanh", "relu", hidden_act=value)


@pytest.mark.parametrize("name", ["deepseek", "gpt-oss"])
def test_an_unknown_activation_of_a_silu_gated_family_is_refused(name, tmp_path):
    refused(tmp_path, CONFIGS[name], "field 'hidden_act'", "silu", hidden_act="tanh_weird")


@pytest.mark.parametrize("value", ["silu", "gelu", "gelu_pytorch_tanh", "gelu_new", "relu", "swiglu"])
def test_known_activations_still_load_where_the_mlp_is_gated_whatever_the_activation(value, tmp_path):
    assert load_model(str(mutated(tmp_path, LLAMA, hidden_act=value))).mlp == "swiglu"


# --- 3. blocks that must be mappings ----------------------------------------------------------------------------

@pytest.mark.parametrize("original, key, value", [
    (LLAMA, "rope_scaling", "big"),
    (LLAMA, "rope_scaling", 8),
    (DEEPSEEK, "rope_scaling", ["yarn", 40]),
    (LLAMA, "quantization_config", "fp8"),
    (DEEPSEEK, "quantization_config", ["fp8"]),
    (DEEPSEEK, "quantization_config", True),
])
def test_a_block_that_is_not_a_mapping_is_refused_by_key(original, key, value, tmp_path):
    refused(tmp_path, original, f"field '{key}'", "mapping", **{key: value})


def test_a_rope_type_that_is_not_a_string_is_refused(tmp_path):
    refused(tmp_path, LLAMA, "rope_scaling.rope_type", rope_scaling={"rope_type": 5, "factor": 2.0})


def test_null_blocks_still_load(tmp_path):
    assert load_model(str(mutated(tmp_path, DEEPSEEK, rope_scaling=None, quantization_config=None))).is_moe


def test_an_unknown_quant_method_is_left_to_the_engine(tmp_path):
    # autotune does not read quant_method (the weight precision is a plan axis, --checkpoint names the format),
    # so it has nothing to decide from it; vLLM and SGLang refuse a method they do not know.
    path = mutated(tmp_path, LLAMA, quantization_config={"quant_method": "bogus"})
    result = invoke("models", "show", path)
    assert result.exit_code == 0, result.output


# --- 4. max_position_embeddings ----------------------------------------------------------------------------------

@pytest.mark.parametrize("value", [1e15, 10**15, 100_000_001, 0, -1, 8192.0, "8192", True])
def test_max_position_embeddings_is_a_bounded_whole_number(value, tmp_path):
    refused(tmp_path, LLAMA, "field 'max_position_embeddings'", "100,000,000", max_position_embeddings=value)


def test_max_position_embeddings_at_the_bound_loads(tmp_path):
    assert load_model(str(mutated(tmp_path, LLAMA, max_position_embeddings=100_000_000))).max_seq_len == 100_000_000


# --- 5. sizes: refused at once, by the key the file holds ------------------------------------------------------

@pytest.mark.parametrize("name", ["deepseek", "qwen-moe", "llama", "gpt-oss"])
def test_a_billion_layers_is_refused_by_its_config_key(name, tmp_path):
    refused(tmp_path, CONFIGS[name], "field 'num_hidden_layers'", "100,000", num_hidden_layers=10**9)


@pytest.mark.parametrize("original, key", [
    (LLAMA, "hidden_size"), (LLAMA, "intermediate_size"), (LLAMA, "vocab_size"), (LLAMA, "num_attention_heads"),
    (DEEPSEEK, "n_routed_experts"), (DEEPSEEK, "moe_intermediate_size"), (DEEPSEEK, "kv_lora_rank"),
    (QWEN_MOE, "num_experts"), (GPT_OSS, "num_local_experts"), (GPT_OSS, "head_dim"),
])
def test_an_absurd_size_is_refused_by_its_config_key(original, key, tmp_path):
    refused(tmp_path, original, f"field '{key}'", "100,000,000", **{key: 10**9})


@pytest.mark.parametrize("key, value", [("num_hidden_layers", "61"), ("vocab_size", 129280.0),
                                        ("tie_word_embeddings", "yes")])
def test_a_wrong_type_is_named_by_its_config_key_not_the_spec_field(key, value, tmp_path):
    refused(tmp_path, DEEPSEEK, f"field '{key}'", **{key: value})


# --- every bundled config still loads --------------------------------------------------------------------------

def _bundled_configs() -> list[Path]:
    files = sorted(BUNDLED.glob("*.json")) + sorted(TEST_CONFIGS.glob("*/config.json"))
    # ../shared holds AIConfigurator's copies beside a quantization sidecar that is no model config
    files += sorted(p for p in SHARED.glob("*.json") if not p.name.endswith(".hf_quant_config.json"))
    return files


@pytest.mark.parametrize("path", _bundled_configs(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_bundled_config_still_loads(path):
    result = invoke("models", "show", path)
    assert result.exit_code == 0, result.output


# --- 6. hardware profiles: physical ceilings --------------------------------------------------------------------

def profile(tmp_path: Path, field: str, value) -> Path:
    data = yaml.safe_load(PROFILE.read_text())
    *sections, key = field.split(".")
    target = data
    for section in sections:
        target = target[section]
    target[key] = value
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize("field, value", [
    ("memory_gib", 1e12),
    ("memory_gib", 100_001),
    ("memory_bandwidth_gb_per_s", 3.35e9),
    ("peak_tflops.bf16", 9.9e7),
    ("peak_tflops.fp8", 2e6),
    ("intra_node.bandwidth_gb_per_s", 4.5e8),
    ("inter_node.bandwidth_gb_per_s", 5e6),
    ("inter_node.latency_us", 1.4e7),
    ("host_link_bandwidth_gb_per_s", 6.4e7),
    ("cpu_optimizer_params_per_s", 1.2e14),
    ("tdp_w", 7e6),
    ("gpus_per_node", 10**8),
])
def test_a_hardware_number_beyond_its_physical_ceiling_is_refused(field, value, tmp_path):
    path = profile(tmp_path, field, value)
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", f"field '{field}'", "physical ceiling")


def test_the_ceiling_is_generous(tmp_path):
    result = invoke("hardware", "show", profile(tmp_path, "memory_gib", 100_000))
    assert result.exit_code == 0, result.output


def test_a_hardware_ceiling_also_applies_to_a_search(tmp_path):
    path = profile(tmp_path, "memory_gib", 1e12)
    assert_user_error(invoke("search", "-m", "llama3-8b", "-H", path, "--gpus", "8", "-s", "4096", "-b", "16"),
                      "gpu.yaml", "memory_gib")


@pytest.mark.parametrize("name", hardware_names())
def test_every_bundled_profile_still_loads(name):
    result = invoke("hardware", "show", name)
    assert result.exit_code == 0, result.output


def test_the_lists_still_load():
    for group in ("models", "hardware"):
        result = invoke(group, "list")
        assert result.exit_code == 0, result.output


def test_sliding_window_false_reads_as_no_window(tmp_path):
    """Some Qwen2 exports write "sliding_window": false with use_sliding_window false: no window, as null."""
    path = mutated(tmp_path, LLAMA, sliding_window=False)
    assert load_model(str(path)).layer_types in (None, ()) or set(load_model(str(path)).layer_types) == {"full"}
