"""Bundled model specs, the spec loader's errors, and Hugging Face config.json conversion."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.inputs.hf_config import spec_mapping_from_hf
from autotune.inputs.modelspec import load_model, model_names

HF_DIR = Path(__file__).parent / "data" / "hf_configs"

BUNDLED = ["gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b", "llama3-405b",
           "mixtral-8x7b", "mixtral-8x22b"]


def hf(folder: str):
    return load_model(str(HF_DIR / folder / "config.json"))


# --- bundled specs ------------------------------------------------------------------

def test_all_required_specs_are_bundled():
    assert set(BUNDLED) <= set(model_names())


@pytest.mark.parametrize("name", BUNDLED)
def test_bundled_spec_loads_under_its_file_name(name):
    spec = load_model(name)
    assert spec.name == name  # the file name is the name people type
    assert spec.source and spec.description
    assert spec.n_heads * spec.head_dim == spec.hidden_size  # true of every bundled model


# Published totals. Ours leave out biases and learned position embeddings, well under 1%.
@pytest.mark.parametrize("name, published", [
    ("llama2-7b", 6.74e9),
    ("llama2-13b", 13.0e9),
    ("llama3-8b", 8.03e9),
    ("llama3-70b", 70.6e9),
    ("llama3-405b", 405.9e9),
    # Narayanan et al. 2021, eq. 2: 12*l*h^2 * (1 + 13/(12h) + (V+s)/(12*l*h)) with V=51200, s=2048.
    ("gpt3-175b", 12 * 96 * 12288**2 * (1 + 13 / (12 * 12288) + (51200 + 2048) / (12 * 96 * 12288))),
    ("mixtral-8x7b", 46.7e9),
    ("mixtral-8x22b", 141e9),
])
def test_bundled_parameter_counts_match_published(name, published):
    assert load_model(name).n_params == pytest.approx(published, rel=0.01)


@pytest.mark.parametrize("name, active", [("mixtral-8x7b", 12.9e9), ("mixtral-8x22b", 39e9)])
def test_mixtral_active_parameters(name, active):
    spec = load_model(name)
    assert spec.moe.n_experts == 8 and spec.moe.top_k == 2
    assert spec.ffn_hidden_size == spec.moe.expert_ffn_hidden_size
    assert spec.n_active_params == pytest.approx(active, rel=0.01)


def test_gpt3_is_the_gpt_architecture():
    spec = load_model("gpt3-175b")
    assert (spec.mlp, spec.norm, spec.position_embedding) == ("gelu", "layernorm", "learned")
    assert spec.tied_embeddings and spec.dropout and spec.vocab_size == 51200


# --- loader errors ------------------------------------------------------------------

def test_unknown_bundled_name_lists_the_bundled_names():
    with pytest.raises(InputError) as err:
        load_model("llama9-1t")
    assert "llama9-1t" in str(err.value)
    for name in BUNDLED:
        assert name in str(err.value)


def test_unknown_key_in_spec_yaml_is_listed(tmp_path):
    text = (Path(__file__).parents[1] / "profiles" / "models" / "llama3-8b.yaml").read_text()
    path = tmp_path / "typo.yaml"
    path.write_text(text + "n_layer: 32\n")
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert "typo.yaml" in str(err.value) and "n_layer" in str(err.value)


def test_spec_yaml_by_path_loads(tmp_path):
    path = tmp_path / "mine.yaml"
    path.write_text("name: tiny\nn_layers: 2\nhidden_size: 64\nffn_hidden_size: 256\nn_heads: 4\nvocab_size: 1000\n")
    spec = load_model(str(path))
    assert (spec.head_dim, spec.n_kv_heads, spec.mlp) == (16, 4, "swiglu")  # derived and default


# --- Hugging Face config.json -----------------------------------------------------

def test_llama3_8b_config_matches_the_bundled_spec():
    converted, bundled = hf("Meta-Llama-3-8B"), load_model("llama3-8b")
    assert converted.name == "meta-llama-3-8b"  # the folder holding config.json
    assert converted.n_params == bundled.n_params
    assert converted.max_seq_len == 8192 and not converted.tied_embeddings


def test_mistral_7b():
    spec = hf("Mistral-7B-v0.1")
    assert (spec.n_layers, spec.hidden_size, spec.ffn_hidden_size) == (32, 4096, 14336)
    assert (spec.n_heads, spec.n_kv_heads, spec.head_dim) == (32, 8, 128)
    assert (spec.mlp, spec.norm, spec.position_embedding) == ("swiglu", "rmsnorm", "rope")
    assert spec.max_seq_len == 32768 and spec.moe is None


def test_mixtral_8x7b_config_matches_the_bundled_spec():
    converted, bundled = hf("Mixtral-8x7B-v0.1"), load_model("mixtral-8x7b")
    assert converted.moe == bundled.moe
    assert converted.n_params == bundled.n_params
    assert converted.n_active_params == bundled.n_active_params


def test_qwen2_7b():
    spec = hf("Qwen2-7B")
    assert (spec.n_layers, spec.hidden_size, spec.n_heads, spec.n_kv_heads, spec.head_dim) == (28, 3584, 28, 4, 128)
    assert spec.vocab_size == 152064 and spec.n_params == pytest.approx(7.6e9, rel=0.01)


def test_qwen2_57b_a14b_has_one_shared_expert():
    spec = hf("Qwen2-57B-A14B")
    moe = spec.moe
    assert (moe.n_experts, moe.top_k, moe.expert_ffn_hidden_size) == (64, 8, 2560)
    assert (moe.n_shared_experts, moe.shared_expert_ffn_hidden_size) == (1, 20480)
    assert (moe.layer_interval, moe.first_dense_layers, spec.n_moe_layers) == (1, 0, 28)
    assert spec.n_params == pytest.approx(57.4e9, rel=0.01)
    assert spec.n_active_params == pytest.approx(14.2e9, rel=0.01)


def test_qwen3_8b_uses_the_explicit_head_dim():
    spec = hf("Qwen3-8B")
    assert (spec.n_layers, spec.hidden_size, spec.n_heads, spec.head_dim) == (36, 4096, 32, 128)
    assert spec.max_seq_len == 40960


def test_qwen3_30b_a3b_head_dim_is_not_hidden_over_heads():
    spec = hf("Qwen3-30B-A3B")
    assert spec.hidden_size // spec.n_heads == 64
    assert spec.head_dim == 128 and spec.q_width == 4096
    moe = spec.moe
    assert (moe.n_experts, moe.top_k, moe.expert_ffn_hidden_size) == (128, 8, 768)
    assert (moe.n_shared_experts, moe.shared_expert_ffn_hidden_size, spec.n_moe_layers) == (0, 0, 48)
    # Qwen3 report: 30.5B total, 3.3B activated (two significant digits).
    assert spec.n_params == pytest.approx(30.5e9, rel=0.01)
    assert spec.n_active_params == pytest.approx(3.3e9, rel=0.02)


def test_a_folder_holding_config_json_loads():
    assert load_model(str(HF_DIR / "Qwen3-8B")).name == "qwen3-8b"


def test_name_prefers_name_or_path_then_cache_repo_then_model_type():
    base = json.loads((HF_DIR / "Qwen3-8B" / "config.json").read_text())
    assert spec_mapping_from_hf({**base, "_name_or_path": "Qwen/Qwen3-8B"}, source="x/config.json")["name"] == "qwen3-8b"
    cache = "hub/models--Qwen--Qwen3-8B/snapshots/0123abc/config.json"
    assert spec_mapping_from_hf(base, source=cache)["name"] == "qwen3-8b"
    assert spec_mapping_from_hf(base, source="config.json")["name"] == "qwen3"


def test_text_config_of_a_multimodal_wrapper_is_used():
    base = json.loads((HF_DIR / "Mistral-7B-v0.1" / "config.json").read_text())
    mapping = spec_mapping_from_hf({"model_type": "llava", "text_config": base}, source="llava/config.json")
    assert mapping["n_layers"] == 32 and mapping["name"] == "llava"


def test_qwen_moe_layer_layouts():
    base = json.loads((HF_DIR / "Qwen3-30B-A3B" / "config.json").read_text())
    leading = spec_mapping_from_hf({**base, "mlp_only_layers": [0, 1, 2]}, source="c.json")["moe"]
    assert (leading["first_dense_layers"], leading["layer_interval"]) == (3, 1)
    every_other = spec_mapping_from_hf({**base, "decoder_sparse_step": 2}, source="c.json")["moe"]
    assert (every_other["first_dense_layers"], every_other["layer_interval"]) == (1, 2)  # layers 1, 3, 5, ...
    with pytest.raises(InputError) as err:
        spec_mapping_from_hf({**base, "mlp_only_layers": [5, 17]}, source="c.json")
    assert "mlp_only_layers" in str(err.value) and "profiles/models/" in str(err.value)


def test_unsupported_model_type_names_file_field_supported_and_fix(tmp_path):
    path = tmp_path / "gpt2" / "config.json"
    path.parent.mkdir()
    path.write_text(json.dumps({"model_type": "gpt2", "n_layer": 12, "n_embd": 768, "n_head": 12, "vocab_size": 50257}))
    with pytest.raises(InputError) as err:
        load_model(str(path))
    message = str(err.value)
    assert str(path) in message and "model_type" in message and "'gpt2'" in message
    assert "qwen3_moe" in message and "profiles/models/" in message
    assert err.value.field == "model_type"


def test_malformed_json_names_the_file(tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "hidden_size": 4096,}')
    with pytest.raises(InputError) as err:
        load_model(str(path))
    assert str(path) in str(err.value) and "malformed JSON" in str(err.value)


def test_missing_required_key_is_named():
    base = json.loads((HF_DIR / "Meta-Llama-3-8B" / "config.json").read_text())
    del base["intermediate_size"]
    with pytest.raises(InputError) as err:
        spec_mapping_from_hf(base, source="llama/config.json")
    assert "intermediate_size" in str(err.value) and "llama/config.json" in str(err.value)


def test_missing_moe_key_is_named():
    base = json.loads((HF_DIR / "Qwen2-57B-A14B" / "config.json").read_text())
    del base["moe_intermediate_size"]
    with pytest.raises(InputError, match="moe_intermediate_size"):
        spec_mapping_from_hf(base, source="c.json")
