"""Attention kinds of a model spec: multi-head latent attention, DeepSeek sparse attention, sliding windows and
Gated DeltaNet linear attention: their KV cache, FLOPs per token, activations, and the spec YAML's checks.

Expected numbers are worked out by hand in the comments from the published shapes (plain integer
arithmetic), never by calling the code under test.
"""

from __future__ import annotations

import pytest

from autotune.errors import InputError
from autotune.inputs.modelspec import (
    MLASpec,
    ModelSpec,
    load_model,
    mean_keys_per_query,
)


def test_mla_without_query_compression():
    # DeepSeek-V2-Lite / Moonlight: q_lora_rank null -> one q_proj h -> a*(d_nope+d_rope).
    mla = MLASpec(kv_lora_rank=512, qk_nope_head_dim=128, qk_rope_head_dim=64, v_head_dim=128)
    params = mla.weight_params(2048, 16)
    # q_proj 2048*16*192 = 6,291,456; kv_a 2048*576 = 1,179,648; kv_b 512*16*256 = 2,097,152;
    # o 16*128*2048 = 4,194,304; kv norm 512 -> 13,763,072
    assert params["q_proj"] == 6_291_456 and "q_a_proj" not in params
    assert mla.params(2048, 16) == 13_763_072
    assert mla.activation_bytes_per_token(2048, 16).keys().isdisjoint({"q_latent", "q_latent_normed"})


# --- KV cache --------------------------------------------------------------------------------------

def test_kv_cache_bytes_per_token_mla_and_gqa():
    # DeepSeek-V3: (512 + 64) * 61 layers = 35,136 elements: 70,272 B in bf16, 35,136 B in fp8 (the ~70 KB
    # per token of DeepSeek's arXiv 2505.09343). GQA would cache 2*128*192*61 = 2,998,272 elements.
    spec = load_model("deepseek-v3")
    assert spec.kv_cache_bytes_per_token() == 70_272
    assert spec.kv_cache_bytes_per_token(bytes_per_element=1) == 35_136
    assert spec.kv_cache_bytes_per_sequence(1000) == 70_272_000
    # GLM-5 adds the DSA indexer's 128-wide key: (576 + 128) * 78 * 2 B = 109,824 B.
    assert load_model("glm-5").kv_cache_bytes_per_token() == 109_824
    # Llama 3 8B: 2 * 8 * 128 * 32 layers * 2 B = 131,072 B.
    assert load_model("llama3-8b").kv_cache_bytes_per_token() == 131_072


def test_kv_cache_of_sliding_layers_is_bounded_by_the_window():
    spec = load_model("gpt-oss-120b")
    # Per layer and token: 2 * 8 * 64 = 1,024 elements. Marginal bytes per token at long context: the 18
    # full layers only, 18 * 1,024 * 2 B = 36,864 B.
    assert spec.kv_cache_bytes_per_token() == 36_864
    # A 4096-token sequence: 18 full layers * 4096 + 18 sliding layers * 128 tokens, times 1,024 * 2 B:
    #   18*4096*2048 = 150,994,944 + 18*128*2048 = 4,718,592 -> 155,713,536 B (38,016 B per token)
    assert spec.kv_cache_bytes_per_sequence(4096) == 155_713_536
    assert spec.kv_cache_bytes_per_token(context_len=4096) == 155_713_536 / 4096
    # Below the window both kinds grow alike: 100 tokens * 36 layers * 2,048 B = 7,372,800 B.
    assert spec.kv_cache_bytes_per_sequence(100) == 7_372_800


def test_linear_attention_keeps_a_fixed_state():
    spec = load_model("qwen3.5-397b-a17b")
    # 15 full layers * 2 * 2 * 256 * 2 B = 30,720 B per token.
    assert spec.kv_cache_bytes_per_token() == 30_720
    # 45 linear layers, each: recurrent state 64 * 128 * 128 * 4 B (fp32) = 4,194,304 B, conv state
    # (2*2048 + 8192) * (4 - 1) * 2 B = 73,728 B -> 45 * 4,268,032 = 192,061,440 B per sequence, any length.
    one_token = spec.kv_cache_bytes_per_sequence(1)
    assert one_token == 192_061_440 + 30_720
    assert spec.kv_cache_bytes_per_sequence(1001) - one_token == 1000 * 30_720


# --- attention FLOPs ---------------------------------------------------------------------------------

def test_mean_keys_per_query():
    assert mean_keys_per_query(4096) == 2048  # the s/2 convention of Megatron's and NeMo's formulas
    assert mean_keys_per_query(4096, causal=False) == 4096
    # Window 128 at s = 4096: mean of min(t, 128) = 128 - 128*127/(2*4096) = 126.015625
    assert mean_keys_per_query(4096, 128) == 126.015625
    assert mean_keys_per_query(100, 128) == 50


def test_mla_attention_core_flops_training_and_decode():
    spec = load_model("deepseek-v3")
    # Training (non-absorbed): per key 2*128*(128+64) + 2*128*128 = 49,152 + 32,768 = 81,920;
    # causal s = 4096 -> 2,048 keys: 167,772,160 per layer (the research note's 167.8 MFLOP).
    assert spec.attention_core_flops_of_kind("full", 4096) == 167_772_160
    # Decode (absorbed, against the 576-wide latent): 2*128*(512+64) + 2*128*512 = 147,456 + 131,072
    # = 278,528 per key; 4,096 keys -> 1,140,850,688 per layer (3.4x the non-absorbed per key).
    assert spec.attention_core_flops_of_kind("full", 4096, decode=True) == 1_140_850_688
    # Projections are the same in both forms: 2 * (187,107,328 - 2,048 norm weights) = 374,210,560.
    assert spec.attention_projection_flops_of_kind("full") == 374_210_560
    assert spec.attention_flops_per_token(4096) == 61 * (374_210_560 + 167_772_160)
    assert spec.attention_flops_per_token(4096, decode=True) == 61 * (374_210_560 + 1_140_850_688)


def test_sliding_window_attention_flops():
    spec = load_model("gpt-oss-120b")
    # Per key: QK^T and PV, 2 * 2 * 64 heads * 64 = 16,384.
    #   full layer at s = 4096: 16,384 * 2,048 = 33,554,432
    #   sliding layer: 16,384 * 126.015625 = 2,064,640
    assert spec.attention_core_flops_of_kind("full", 4096) == 33_554_432
    assert spec.attention_core_flops_of_kind("sliding", 4096) == 2_064_640
    assert spec.attention_core_flops_per_token(4096) == 18 * (33_554_432 + 2_064_640)
    # Decode at context 4096: sliding layers see 128 keys (2,097,152), full ones 4,096 (67,108,864).
    assert spec.attention_core_flops_of_kind("sliding", 4096, decode=True) == 2_097_152
    assert spec.attention_core_flops_of_kind("full", 4096, decode=True) == 67_108_864


def test_dsa_bounds_the_core_but_not_the_indexer():
    spec = load_model("glm-5")
    # MLA per key: 2*64*(192+64) + 2*64*256 = 65,536. Indexer per key: 2 * 32 * (128 + 1) = 8,256.
    # s = 2048 (<= top-k): 1,024 keys: 67,108,864 + 8,454,144 = 75,563,008
    assert spec.attention_core_flops_of_kind("full", 2048) == 75_563_008
    # s = 8192: core keys 2048 - 2048*2047/(2*8192) = 1,792.125 -> 117,448,704; indexer over s/2 = 4,096 keys
    # -> 33,816,576; total 151,265,280
    assert spec.attention_core_flops_of_kind("full", 8192) == 151_265_280
    # Decode at 100,000 cached tokens: absorbed core on 2,048 keys, 2*64*576 + 2*64*512 = 139,264 per key
    # -> 285,212,672; indexer on all 100,000 keys -> 825,600,000.
    assert spec.attention_core_flops_of_kind("full", 100_000, decode=True) == 285_212_672 + 825_600_000


def test_gated_deltanet_flops_are_independent_of_the_context():
    spec = load_model("qwen3.5-397b-a17b")
    # Megatron-LM gdn_layer_flops (forward, x2): in_proj 4096*(2*2048 + 2*8192 + 2*64) = 84,410,368,
    # out_proj 4096*8192 = 33,554,432 -> projections 235,929,600; conv 4*(2*2048+8192) = 49,152 and
    # delta rule 4*64*128*128 = 4,194,304 -> core 8,486,912.
    assert spec.attention_projection_flops_of_kind("linear") == 235_929_600
    assert spec.attention_core_flops_of_kind("linear", 4096) == spec.attention_core_flops_of_kind("linear", 10) == 8_486_912
    # Gated full attention: 2*4096*(2*8192 + 2*512) + 2*8192*4096 = 142,606,336 + 67,108,864 = 209,715,200
    assert spec.attention_projection_flops_of_kind("full") == 209_715_200


# --- activations held for backward ---------------------------------------------------------------------

def test_mla_activation_bytes_per_token():
    spec = load_model("deepseek-v3")
    parts = spec.attention_activation_bytes_per_token()
    # 16-bit elements: h 7168 twice, q latent 1536 twice, kv latent 512 twice, k_rope 64,
    # Q and K 128*192 each, V and O 128*128 each; fp32 LSE 4 B * 128 heads.
    #   2 * (14,336 + 3,072 + 1,024 + 64 + 49,152 + 32,768) + 512 = 200,832 + 512 = 201,344 B (196.6 KiB)
    assert parts["query"] == 2 * 24_576 and parts["softmax_lse"] == 512
    assert sum(parts.values()) == 201_344
    # With norms and up-projections recomputed (DeepSeek-V3 §3.2.3): h + 1536 + 512 + 64 + 128*128 at
    # 2 B plus the LSE: 2 * 25,664 + 512 = 51,840 B (50.6 KiB)
    assert sum(spec.attention_activation_bytes_per_token(recompute_up_proj=True).values()) == 51_840
    # Up-projections that recomputation repeats: 2 * (1536*128*192 + 512*128*256) = 109,051,904
    assert spec.mla.up_projection_flops_per_token(128) == 109_051_904


def test_gqa_activation_bytes_per_token():
    parts = load_model("llama3-8b").attention_activation_bytes_per_token()
    # 2 B * (4096 + 4096 + 4096 + 1024 + 1024 + 4096) + 4 B * 32 = 36,864 + 128
    assert sum(parts.values()) == 36_992
    with pytest.raises(ValueError, match="recompute_up_proj"):
        load_model("llama3-8b").attention_activation_bytes_per_token(recompute_up_proj=True)


# --- validation of spec YAMLs ------------------------------------------------------------------------

BASE = "name: tiny\nn_layers: 4\nhidden_size: 64\nffn_hidden_size: 256\nn_heads: 4\nvocab_size: 1000\n"


def _load(tmp_path, text: str) -> ModelSpec:
    path = tmp_path / "spec.yaml"
    path.write_text(BASE + text)
    return load_model(str(path))


def test_spec_yaml_with_mla_derives_head_dim(tmp_path):
    spec = _load(tmp_path, "mla: {kv_lora_rank: 32, qk_nope_head_dim: 16, qk_rope_head_dim: 8, v_head_dim: 16}\n")
    assert (spec.head_dim, spec.n_kv_heads, spec.mla.q_lora_rank) == (24, 4, None)


@pytest.mark.parametrize("text, words", [
    ("mla: {kv_lora_rank: 32, qk_nope_head_dim: 16, qk_rope_head_dim: 8, v_head_dim: 16}\nhead_dim: 16\n",
     ["head_dim", "qk_head_dim=24"]),
    ("mla: {kv_lora_rank: 32, qk_nope_head_dim: 16, qk_rope_head_dim: 8, v_head_dim: 16, rank: 3}\n", ["mla.rank"]),
    ("dsa: {index_n_heads: 2, index_head_dim: 8, index_topk: 16}\n", ["dsa must come with mla"]),
    ("layer_types: [sliding, full]\n", ["sliding_window must be >= 1"]),
    ("sliding_window: 16\n", ["sliding_window must come with"]),
    ("layer_types: [sliding, full, full]\nsliding_window: 16\n", ["layer_types", "divides n_layers=4"]),
    ("layer_types: [local]\n", ["layer_types", "local"]),
    ("layer_types: [linear, full]\n", ["linear_attention must be given"]),
    ("mtp_layers: -1\n", ["mtp_layers"]),
])
def test_spec_yaml_errors_name_the_field(tmp_path, text, words):
    with pytest.raises(InputError) as err:
        _load(tmp_path, text)
    for word in words:
        assert word in str(err.value)
    assert "spec.yaml" in str(err.value)


def test_spec_yaml_layer_pattern_repeats(tmp_path):
    spec = _load(tmp_path, "layer_types: [sliding, full]\nsliding_window: 16\n")
    assert spec.layer_types == ("sliding", "full", "sliding", "full")
