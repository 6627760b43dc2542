"""Turn a Hugging Face ``config.json`` into a model-spec mapping (see profiles/models/*.yaml).

Only families whose layout we know exactly are accepted, and each reads exactly the keys that
fix its shapes (the module shapes of the Hugging Face ``transformers`` implementation of that
``model_type``):

* dense: llama, mistral, qwen2, qwen3;
* mixture of experts: mixtral, qwen2_moe, qwen3_moe, gpt_oss (alternating sliding-window and full
  attention, attention sinks), minimax_m2;
* multi-head latent attention: deepseek_v2, deepseek_v3 (DeepSeek-V3/R1/V3.1, Moonlight), kimi_k2
  (Kimi-K2/K2.5, whose multimodal wrapper ``kimi_k25`` keeps it under ``text_config``), glm_moe_dsa
  (GLM-5: MLA plus DeepSeek sparse attention);
* hybrid linear attention: qwen3_5_moe (Qwen3.5, under ``text_config``): Gated DeltaNet layers and
  gated full-attention layers.

Anything else, or a key whose value the spec cannot express (a shared DSA indexer, MiniMax's
lightning attention, an activation other than SiLU-gated), is refused with an error naming the
field, rather than guessed: a wrong shape gives wrong plans silently.  Keys that do not change
shapes or cost (router scoring, token ids, the quantization_config block) are not interpreted, but
a block that is not a mapping (``rope_scaling: "big"``) is refused, as are a dtype torch does not have, an
``architectures`` that is not a list of names and a quantization ``group_size`` of 0, and sizes beyond the
spec's bounds, checked before anything loops over the layers;
biases, QK-norm weights and router bias vectors are not counted (well under 0.1% of any model).
Vision towers of multimodal wrappers (``vision_config``) are not counted either.
"""

from __future__ import annotations

import math

from pathlib import Path, PurePosixPath

from ..errors import InputError, require_keys
from . import loading
from .loading import MAX_LAYERS, MAX_SIZE

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe", "gpt_oss", "minimax_m2")
MLA_TYPES = ("deepseek_v2", "deepseek_v3", "kimi_k2", "glm_moe_dsa")
HYBRID_TYPES = ("qwen3_5_moe_text",)
SUPPORTED_TYPES = DENSE_TYPES + MOE_TYPES + MLA_TYPES + HYBRID_TYPES
# Multimodal wrappers whose language model sits under text_config (listed in errors for users).
WRAPPER_TYPES = ("kimi_k25", "qwen3_5_moe")

_REQUIRED = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
_REQUIRED_BY_TYPE = {
    **{t: ("intermediate_size",) for t in DENSE_TYPES},
    "mixtral": ("intermediate_size", "num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": ("intermediate_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "qwen3_moe": ("intermediate_size", "num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "gpt_oss": ("intermediate_size", "num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok"),
    "minimax_m2": ("intermediate_size", "num_key_value_heads", "head_dim", "num_local_experts", "num_experts_per_tok"),
    **{t: ("intermediate_size", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim")
       for t in MLA_TYPES},
    "qwen3_5_moe_text": ("num_key_value_heads", "head_dim", "num_experts", "num_experts_per_tok", "moe_intermediate_size",
                         "layer_types", "linear_num_key_heads", "linear_key_head_dim", "linear_num_value_heads",
                         "linear_value_head_dim", "linear_conv_kernel_dim"),
}
# The HF names of per-layer attention kinds.
_HF_LAYER_TYPES = {"full_attention": "full", "sliding_attention": "sliding", "linear_attention": "linear"}
_GATED_ACTIVATIONS = ("silu", "swiglu")
# The activations Hugging Face transformers knows (ACT2FN, transformers/activations.py), plus "swiglu" as above.
# Llama, Mistral, Qwen2/3 and their MoE build a gated MLP (gate, up, down) whatever the activation, so any of
# these gives the same shapes and FLOPs; a name outside them is a typo that HF itself would refuse.
_KNOWN_ACTIVATIONS = ("silu", "swish", "swiglu", "gelu", "gelu_new", "gelu_fast", "gelu_pytorch_tanh", "gelu_accurate",
                      "gelu_python", "gelu_10", "quick_gelu", "relu", "relu2", "relu6", "leaky_relu", "prelu", "mish",
                      "sigmoid", "tanh", "laplace", "linear", "xielu")
# Sizes checked before anything else, by the key the file holds: num_hidden_layers bounds the per-layer loops
# (a billion layers took minutes and gigabytes before the spec refused it), the others the spec's own bounds.
_LAYER_COUNT_KEYS = ("num_hidden_layers", "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_modules")
_SIZE_KEYS = ("hidden_size", "intermediate_size", "moe_intermediate_size", "vocab_size", "num_attention_heads",
              "head_dim", "num_experts", "num_local_experts", "n_routed_experts",
              "n_shared_experts", "shared_expert_intermediate_size", "shared_intermediate_size", "kv_lora_rank",
              "q_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "sliding_window", "n_group",
              "index_n_heads", "index_head_dim", "index_topk", "linear_num_key_heads", "linear_key_head_dim",
              "linear_num_value_heads", "linear_value_head_dim", "linear_conv_kernel_dim")
# The longest context a config may state: ten times the longest published (Llama 4 Scout, 10M tokens).
MAX_POSITIONS = 100_000_000
# RoPE scalings as transformers names them (ROPE_INIT_FUNCTIONS; su and mrope are older spellings): those that
# stretch max_position_embeddings by their factor, as vLLM derives its maximum model length, and those whose configs
# already state the full window.  Another name is refused: it was read as a linear stretch by its factor.
STRETCHING_ROPE = ("yarn", "linear", "dynamic")
FULL_WINDOW_ROPE = ("default", "llama3", "longrope", "su", "mrope")


# Types whose checkpoints load through one another's class: Kimi-K2's config names DeepseekV3ForCausalLM, the class
# vLLM and SGLang run it with (the same MLA layout).
_SAME_LAYOUT = (frozenset({"deepseek_v2", "deepseek_v3", "kimi_k2", "kimi_k25"}),)


def architecture_note(config: dict, *, source: str) -> str:
    """What to say when ``architectures`` names the class of another supported type than ``model_type``: the plan
    follows model_type (what transformers dispatches on), but vLLM and SGLang build the class ``architectures``
    names, so the checkpoint is planned as one model and served as another.  "" when they agree, or when the class
    is not one of a supported type."""
    model_type, archs = config.get("model_type"), config.get("architectures")
    if not isinstance(model_type, str) or not isinstance(archs, list) or not archs or not isinstance(archs[0], str):
        return ""
    model_type = model_type.removesuffix("_text")  # Qwen3.5's text model is the class of qwen3_5_moe
    known = sorted({t.removesuffix("_text") for t in SUPPORTED_TYPES + WRAPPER_TYPES}, key=len, reverse=True)
    squashed = archs[0].replace("_", "").lower()
    arch_type = next((t for t in known if squashed.startswith(t.replace("_", ""))), None)
    if arch_type is None or arch_type == model_type or any({arch_type, model_type} <= group for group in _SAME_LAYOUT):
        return ""
    return (f"{source}: architectures names {archs[0]} (a {arch_type} model) but model_type is {model_type!r}; "
            f"autotune plans it as {model_type}, while vLLM and SGLang build the class architectures names. "
            f"Correct whichever field is wrong")


def spec_mapping_from_hf(config: dict, *, source: str) -> dict:
    """The spec mapping (input of ``model_from_mapping``) for an HF ``config.json`` dict."""
    wrapper_type = config.get("model_type")
    # Multimodal wrappers (Llava, Mistral3, Kimi-K2.5, Qwen3.5, ...) keep the language model under text_config.
    text_config = config.get("text_config")
    if text_config is not None and not isinstance(text_config, dict):
        raise InputError(f"must be a mapping (the language model's config) or null, but got (text_config={text_config!r})",
                         source=source, field="text_config")
    if isinstance(text_config, dict):
        merged = {"_name_or_path": config.get("_name_or_path"), **text_config}
        if "tie_word_embeddings" not in text_config and "tie_word_embeddings" in config:
            merged["tie_word_embeddings"] = config["tie_word_embeddings"]
        config = merged

    require_keys(config, {"model_type"}, source=source)
    model_type = config["model_type"]
    if model_type not in SUPPORTED_TYPES:
        raise InputError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_TYPES)} "
            f"(and the wrappers {', '.join(WRAPPER_TYPES)} around them). "
            "Write a model spec YAML instead; see profiles/models/",
            source=source, field="model_type",
        )
    require_keys(config, set(_REQUIRED) | set(_REQUIRED_BY_TYPE.get(model_type, ())), source=source)
    _check_sizes(config, source)  # first: a billion layers must not be looped over
    _check_blocks(config, source)
    _check_unread_fields(config, source)
    if model_type not in DENSE_TYPES + ("mixtral", "qwen2_moe", "qwen3_moe"):
        _check_gated_activation(config, source)
    else:
        _check_known_activation(config, source)

    n_layers = loading.integer(config, "num_hidden_layers", source=source, maximum=MAX_LAYERS)
    for key in _LAYER_COUNT_KEYS[1:]:  # the MTP modules, each one block beside the model's own layers
        mtp = config.get(key)
        if isinstance(mtp, int) and not isinstance(mtp, bool) and mtp > n_layers:
            raise InputError(f"{key} <= num_hidden_layers must hold (each multi-token-prediction module is one block "
                             f"beside the model's layers; DeepSeek-V3 has 1 of 61), but got ({key}={mtp}, "
                             f"num_hidden_layers={n_layers}); check the value", source=source, field=key)
    hidden = loading.integer(config, "hidden_size", source=source)
    n_heads = loading.integer(config, "num_attention_heads", source=source)
    spec = {
        "name": _model_name(config, source, model_type if wrapper_type == model_type else wrapper_type or model_type),
        "description": f"converted from a Hugging Face config.json (model_type {model_type})",
        "source": source,
        "n_layers": n_layers,
        "hidden_size": hidden,
        # The width of a dense MLP layer. In Mixtral and gpt-oss every layer is MoE and this is also
        # the expert width; in Qwen MoE and DeepSeek it is the width of the dense layers, while the
        # expert width is moe_intermediate_size.  Qwen3.5 has no dense layer and no
        # intermediate_size: the expert width stands in (unused).
        "ffn_hidden_size": _ffn_hidden_size(config, source),
        "n_heads": n_heads,
        "vocab_size": loading.integer(config, "vocab_size", source=source),
        # All supported families use a gated MLP (gate, up, down); the activation (silu) does not
        # change the matrix count, which is what "swiglu" stands for here.
        "mlp": "swiglu",
        "tied_embeddings": loading.boolean(config, "tie_word_embeddings", source=source, default=False),
        "max_seq_len": _context_window(config, source),
        "norm": "rmsnorm",
        "position_embedding": "rope",
        # HF configs carry attention_dropout = 0.0 for these models; honour a non-zero one.
        "dropout": bool(loading.number(config, "attention_dropout", source=source, positive=False, minimum=0,
                                       maximum=1, default=0)),
    }
    if model_type in MLA_TYPES:
        spec.update(_mla_family(config, model_type, source))
        return _with_launch_fields(spec, config, model_type, source)
    spec["n_kv_heads"] = _n_kv_heads(config, n_heads, source)
    spec["head_dim"] = _head_dim(config, hidden, n_heads, source)
    spec.update(_attention_layers(config, model_type, source))
    if model_type == "gpt_oss":
        spec["attention_sinks"] = True  # GptOssAttention.sinks: one learned logit per head (not in the config)
    if model_type == "qwen3_5_moe_text":
        spec.update(_qwen3_5(config, source))
    if model_type == "minimax_m2":
        spec.update(_minimax_m2_extras(config, source))
    if model_type in MOE_TYPES or model_type in HYBRID_TYPES:
        moe = _moe(config, model_type, source)
        if moe is not None:
            spec["moe"] = moe
    return _with_launch_fields(spec, config, model_type, source)


# RoPE scalings a launch file can state (transformers' rope_type; Megatron-LM's --use-rope-scaling is Llama 3.1's)
# and routers' score functions (scoring_func): the values a model spec takes (modelspec.ModelSpec, MoESpec).
ROPE_SCALINGS = ("llama3", "yarn", "linear", "dynamic", "longrope", "mrope")
# Biases on the attention projections: none, q/k/v (Qwen2's Qwen2Attention), or q/k/v/o (attention_bias: true in
# Llama, Qwen3, gpt-oss and the others that read it).
ATTENTION_BIASES = ("none", "qkv", "all")
_QKV_BIAS_TYPES = ("qwen2", "qwen2_moe")
ROUTER_SCORES = ("softmax", "sigmoid")
# DeepSeek's routers (MoEGate.topk_method in its modeling code): top-k of all experts, of the best groups, or of the
# best groups with a bias on the scores (DeepSeek-V3's auxiliary-loss-free balancing)
TOPK_METHODS = ("greedy", "group_limited_greedy", "noaux_tc")
# Qwen3's attention normalises each query and key head (Qwen3Attention.q_norm / k_norm, as do Qwen3-Next's and
# Qwen3.5's); no config key says so, the architecture does.
QK_NORM_TYPES = ("qwen3", "qwen3_moe", "qwen3_next", "qwen3_5_moe", "qwen3_5_moe_text")
# transformers' older spellings of a RoPE scaling (su: longrope)
_ROPE_ALIASES = {"su": "longrope"}


def _with_launch_fields(spec: dict, config: dict, model_type: str, source: str) -> dict:
    """What the launch files need to build the same network (modelspec.LAUNCH_ONLY_FIELDS): the RoPE base and
    scaling, QK normalisation, and the router's score function, bias balancing and scaling (DeepSeek-V3's sigmoid,
    noaux_tc and routed_scaling_factor).  A scaling these files cannot state is left unstated, not refused."""
    rope = config.get("rope_parameters") if isinstance(config.get("rope_parameters"), dict) else {}
    theta = loading.number(config, "rope_theta", source=source, default=None, maximum=1e12)
    if theta is None and rope:
        theta = loading.number(rope, "rope_theta", source=source, section="rope_parameters", default=None,
                               maximum=1e12)
    if theta is not None and not theta > 1:  # the spec's own rule (modelspec), named by the config's key
        raise InputError(f"must be > 1 (the RoPE base: 10000 in Llama 2, 500000 in Llama 3), but got (rope_theta="
                         f"{theta!r})", source=source, field="rope_theta" if config.get("rope_theta") is not None
                         else "rope_parameters.rope_theta")
    if theta is not None:
        spec["rope_theta"] = float(theta)
    scaling = config.get("rope_scaling") if isinstance(config.get("rope_scaling"), dict) else rope
    kind = (scaling or {}).get("rope_type") or (scaling or {}).get("type")
    kind = _ROPE_ALIASES.get(kind, kind) if isinstance(kind, str) else None
    if kind in ROPE_SCALINGS:
        spec["rope_scaling"] = kind
    # Megatron's --qk-layernorm normalises each head; MiniMax-M2's qk_norm_type "per_layer" normalises all heads
    # together, which it cannot state (recorded, and said in the launch file's header)
    # (booleans and names checked: "use_qk_norm": "true" or a qk_norm_type of neither kind planned no norm at all,
    # and the launch file left --qk-layernorm out)
    qk_norm = loading.boolean(config, "use_qk_norm", source=source, default=False)
    qk_norm_type = config.get("qk_norm_type")
    if qk_norm and qk_norm_type is not None and qk_norm_type not in ("per_head", "per_layer"):
        raise InputError(f"must be per_head or per_layer, but got (qk_norm_type={qk_norm_type!r})", source=source,
                         field="qk_norm_type")
    if model_type in QK_NORM_TYPES or (qk_norm and qk_norm_type in (None, "per_head")):
        spec["qk_layernorm"] = True
    elif qk_norm and qk_norm_type == "per_layer":
        spec["qk_norm_per_layer"] = True
    # RoPE on part of each head (MiniMax-M2's rotary_dim 64 of 128; partial_rotary_factor elsewhere): Megatron's
    # --rotary-percent.  MLA states its RoPE part apart (qk_rope_head_dim).
    if model_type not in MLA_TYPES:
        factor = loading.number(config, "partial_rotary_factor", source=source, default=None, maximum=1.0)
        if factor is None and "partial_rotary_factor" in rope:
            factor = loading.number(rope, "partial_rotary_factor", source=source, section="rope_parameters",
                                    default=None, maximum=1.0)
        head_dim = spec.get("head_dim") or spec["hidden_size"] // spec["n_heads"]
        # rotary_dim: a key of MiniMax-M2's config only (transformers reads it there); elsewhere it is not the model's
        if factor is None and model_type == "minimax_m2" and config.get("rotary_dim") is not None:
            rotary = loading.integer(config, "rotary_dim", source=source, maximum=head_dim)
            factor = rotary / head_dim
        if factor is not None and factor * head_dim < 2:  # the spec's own rule, named by the config's key
            key = "rotary_dim" if model_type == "minimax_m2" and config.get("partial_rotary_factor") is None \
                and "partial_rotary_factor" not in rope else "partial_rotary_factor"
            raise InputError(f"must rotate at least one pair of each head's {head_dim} dimensions, but got "
                             f"({key}={config.get(key, rope.get(key))!r}); fix the value", source=source, field=key)
        if factor is not None and factor < 1.0:
            spec["rotary_percent"] = float(factor)
    if model_type in _QKV_BIAS_TYPES:
        spec["attention_bias"] = "qkv"
    elif model_type not in MLA_TYPES and loading.boolean(config, "attention_bias", source=source, default=False):
        spec["attention_bias"] = "all"
    moe = spec.get("moe")
    if isinstance(moe, dict):
        # read, so checked: "scoring_func": "banana" was planned as softmax and "topk_method": 5 as no bias
        # balancing, where vLLM refuses a score function it does not know (a dense model reads neither)
        score = _named(config, "scoring_func", ROUTER_SCORES, source)
        topk_method = _named(config, "topk_method", TOPK_METHODS, source)
        if score is not None:
            moe["router_score"] = score
        # DeepSeek's topk_method noaux_tc and MiniMax-M2's use_routing_bias: an expert bias on sigmoid scores
        routing_bias = loading.boolean(config, "use_routing_bias", source=source, default=False)
        if score == "sigmoid" and (topk_method == "noaux_tc" or routing_bias):
            moe["router_expert_bias"] = True
        scale = loading.number(config, "routed_scaling_factor", source=source, default=None, maximum=1e3)
        if scale is not None and scale != 1.0:
            moe["router_topk_scaling"] = float(scale)
        coeff = loading.number(config, "router_aux_loss_coef", source=source, default=None, minimum=0.0, maximum=100.0)
        if coeff is not None:
            moe["router_aux_loss_coeff"] = float(coeff)
    return spec


def _named(config: dict, key: str, choices: tuple[str, ...], source: str) -> str | None:
    """A key whose value is one of ``choices`` (or null / absent: None); another value is refused, naming them."""
    value = config.get(key)
    if value is not None and value not in choices:
        raise InputError(f"must be one of {', '.join(choices)} (or null), but got ({key}={_short(value)}); fix the "
                         "value", source=source, field=key)
    return value


_NONZERO_KEYS = frozenset({"num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size"})


def _check_sizes(config: dict, source: str) -> None:
    """Every size key the file holds, within the spec's bounds and named as the file names it.

    The type and the range 0 to the bound are checked here (before any per-layer loop); what a family needs of
    each key (>= 1 where 0 cannot mean "none") is checked where it is read.
    """
    for keys, limit, what in ((_LAYER_COUNT_KEYS, MAX_LAYERS, "more layers than any model has"),
                              (_SIZE_KEYS, MAX_SIZE, "wider, or more, than any model has")):
        for key in keys:
            value = config.get(key)
            if value is None or (key == "sliding_window" and value is False):  # false: no window, as null
                continue
            if isinstance(value, bool) or not isinstance(value, int):
                raise InputError(f"must be an integer, but got {value!r}", source=source, field=key)
            if value > limit:
                raise InputError(f"must be <= {limit:,} (beyond it is {what}; check the value), but got {value!r}",
                                 source=source, field=key)
            # 0 is "none" for some keys (q_lora_rank, first_k_dense_replace); below it is damage.  A key no model
            # has 0 of says its real bound at once (-1 said ">= 0", and 0 then ">= 1")
            least = 1 if key in _NONZERO_KEYS else 0
            if value < least:
                raise InputError(f"must be >= {least}, but got {value!r}", source=source, field=key)
    _max_positions(config, source)


def _max_positions(config: dict, source: str) -> int | None:
    """``max_position_embeddings``: a whole number of tokens from 1 to MAX_POSITIONS, or absent (null)."""
    value = config.get("max_position_embeddings")
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_POSITIONS:
        raise InputError(f"must be a whole number of tokens from 1 to {MAX_POSITIONS:,} (the context the model "
                         f"was trained for, e.g. 131072), but got {value!r}", source=source,
                         field="max_position_embeddings")
    return value


def _check_blocks(config: dict, source: str) -> None:
    """Blocks that autotune does not interpret (beyond a RoPE factor) must still be what HF writes: a mapping,
    or null.  A string (``"fp8"``, ``"yarn"``) is a hand edit that an engine would refuse to load."""
    for key, what in (("rope_scaling", "rope_type / type, factor, ..."),
                      ("rope_parameters", "rope_theta, rope_type, ..., as transformers 5 writes it"),
                      ("quantization_config", "quant_method, ..., as the checkpoint's exporter writes it")):
        value = config.get(key)
        if value is not None and not isinstance(value, dict):
            raise InputError(f"must be a mapping ({what}) or null, but got {value!r}", source=source, field=key)


# torch's dtype names (torch.* attributes, as transformers writes torch_dtype / dtype; "auto" defers to the
# weights): autotune plans the serving or training precision itself, so the value is checked, not used
_TORCH_DTYPES = frozenset({
    "auto", "float32", "float", "float64", "double", "float16", "half", "bfloat16", "complex32", "chalf",
    "complex64", "cfloat", "complex128", "cdouble", "uint8", "uint16", "uint32", "uint64", "int8", "int16", "short",
    "int32", "int", "int64", "long", "bool", "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz",
    "float8_e8m0fnu", "float4_e2m1fn_x2", "quint8", "qint8", "qint32", "quint4x2", "quint2x4"})


def _check_unread_fields(config: dict, source: str) -> None:
    """Fields autotune does not read must still be what transformers writes: a hand edit there (a dtype torch does
    not have, an architectures string, a group size of 0) would make the engine refuse the checkpoint, so the
    config is refused here, naming the field, rather than planned as if it loaded."""
    for key in ("torch_dtype", "dtype"):
        value = config.get(key)
        if value is not None and (not isinstance(value, str) or value.removeprefix("torch.") not in _TORCH_DTYPES):
            raise InputError(f"must be a torch dtype name (e.g. bfloat16, float16, float32) or auto, but got "
                             f"({key}={value!r})", source=source, field=key)
    archs = config.get("architectures")
    if archs is not None and (not isinstance(archs, list) or not all(isinstance(a, str) and a for a in archs)):
        raise InputError(f"must be a list of class names (e.g. [\"LlamaForCausalLM\"]), but got (architectures="
                         f"{archs!r})", source=source, field="architectures")
    for where, block in (("quantization_config", config.get("quantization_config")),
                         ("text_config.quantization_config", (config.get("text_config") or {}).get("quantization_config")
                          if isinstance(config.get("text_config"), dict) else None)):
        if not isinstance(block, dict) or "group_size" not in block:
            continue
        size = block["group_size"]  # GPTQ / AWQ: weights per scale; -1 is per channel
        if isinstance(size, bool) or not isinstance(size, int) or not (size == -1 or 1 <= size <= 1 << 20):
            raise InputError(f"must be a whole number of weights per scale, -1 (per channel) or 1 to {1 << 20:,}, but "
                             f"got (group_size={size!r})", source=source, field=f"{where}.group_size")


def _check_gated_activation(config: dict, source: str) -> None:
    act = config.get("hidden_act")
    if act is not None and act not in _GATED_ACTIVATIONS:
        raise InputError(f"must be a SiLU-gated activation ({', '.join(_GATED_ACTIVATIONS)}) for this family, but got {act!r}",
                         source=source, field="hidden_act")


def _check_known_activation(config: dict, source: str) -> None:
    act = config.get("hidden_act")
    if act is not None and act not in _KNOWN_ACTIVATIONS:
        raise InputError(f"must be an activation Hugging Face transformers knows ({', '.join(_KNOWN_ACTIVATIONS)}), "
                         f"but got {act!r}; most models use silu", source=source, field="hidden_act")


def _ffn_hidden_size(config: dict, source: str) -> int | None:
    # Read, not `or`-ed: an intermediate_size of 0 is a broken file, not "use the expert width".
    width = loading.integer(config, "intermediate_size", source=source, default=None)
    if width is None:
        width = loading.integer(config, "moe_intermediate_size", source=source, default=None)
    return width


def _context_window(config: dict, source: str) -> int | None:
    """The context an engine allows: ``max_position_embeddings``, stretched by a RoPE scaling factor the way
    vLLM derives its maximum model length (config.py, _get_and_verify_max_len): YaRN scales the original
    window, linear and dynamic scaling the configured one; llama3 and longrope configs already state their
    full window."""
    base = _max_positions(config, source)
    rope = config.get("rope_scaling")
    if isinstance(rope, dict) and rope.get("factor") is not None:  # checked whatever the kind: a factor of -8 is damage
        loading.number(rope, "factor", source=source, section="rope_scaling", maximum=1e4)
    kind = rope.get("rope_type", rope.get("type")) if isinstance(rope, dict) else None
    if kind is not None and not isinstance(kind, str):
        raise InputError(f"must be a string (yarn, linear, dynamic, llama3, ...), but got {kind!r}", source=source,
                         field="rope_scaling.rope_type" if "rope_type" in rope else "rope_scaling.type")
    if kind is not None and kind not in STRETCHING_ROPE + FULL_WINDOW_ROPE:  # was read as a linear stretch
        raise InputError(f"must be one of {', '.join(STRETCHING_ROPE + FULL_WINDOW_ROPE)}, as transformers names its "
                         f"RoPE scalings, but got ({'rope_type' if 'rope_type' in rope else 'type'}={kind!r}); fix the "
                         "name, or write a model spec YAML with the model's max_seq_len", source=source,
                         field="rope_scaling.rope_type" if "rope_type" in rope else "rope_scaling.type")
    if kind in STRETCHING_ROPE and rope.get("factor") is None:  # transformers refuses it too
        raise InputError(f"must be given for rope_type {kind!r} (the factor the context is stretched by, e.g. 4.0), "
                         "but got (factor=None)", source=source, field="rope_scaling.factor")
    original = rope.get("original_max_position_embeddings") if kind == "yarn" else None
    if isinstance(original, float) and original.is_integer():  # exporters write 4096.0
        original = int(original)
    if original is not None and (isinstance(original, bool) or not isinstance(original, int)
                                 or not 1 <= original <= MAX_POSITIONS):
        raise InputError(f"must be a whole number of tokens from 1 to {MAX_POSITIONS:,} (the window YaRN stretches), "
                         f"but got (original_max_position_embeddings={original!r})", source=source,
                         field="rope_scaling.original_max_position_embeddings")
    if not isinstance(rope, dict) or rope.get("factor") is None or base is None:
        return base
    if kind in FULL_WINDOW_ROPE:
        return base
    factor = loading.number(rope, "factor", source=source, section="rope_scaling", maximum=1e4)
    window = (original if original is not None else base) * factor
    return int(window)


def _n_kv_heads(config: dict, n_heads: int, source: str) -> int:
    """Absent or null means multi-head attention (HF's own default); 0 or less is a broken file, not MHA."""
    n_kv = config.get("num_key_value_heads")
    if n_kv is None:
        return n_heads
    if isinstance(n_kv, bool) or not isinstance(n_kv, int) or n_kv < 1:
        raise InputError(f"must be a whole number >= 1 (leave it out or null for multi-head attention), but got {n_kv!r}",
                         source=source, field="num_key_value_heads")
    if n_heads % n_kv:
        raise InputError(f"num_attention_heads must be a multiple of num_key_value_heads, but got "
                         f"(num_attention_heads={n_heads}, num_key_value_heads={n_kv})",
                         source=source, field="num_key_value_heads")
    return n_kv


def _expert_pair(config: dict, experts_key: str, source: str, *, default: int | None = None) -> tuple[int, int]:
    """``(experts, top_k)`` of a MoE family, read together: HF builds a dense model from 0 experts, so a
    top-k beside 0 experts contradicts itself, and reading it as dense would plan the wrong model silently."""
    kwargs = {} if default is None else {"default": default}
    experts = loading.integer(config, experts_key, source=source, minimum=0, **kwargs)
    raw_top_k = config.get("num_experts_per_tok")
    if not experts:
        if raw_top_k not in (None, 0):
            raise InputError(f"{experts_key} and num_experts_per_tok must agree (0 experts builds a dense model), but "
                             f"got ({experts_key}={config.get(experts_key)!r}, num_experts_per_tok={raw_top_k!r}); set "
                             f"{experts_key} to the number of routed experts, or num_experts_per_tok to 0 for a dense "
                             "model", source=source, field=experts_key)
        return 0, 0
    top_k = loading.integer(config, "num_experts_per_tok", source=source)
    if top_k > experts:
        raise InputError(f"num_experts_per_tok must be <= {experts_key}, but got (num_experts_per_tok={top_k}, "
                         f"{experts_key}={experts})", source=source, field="num_experts_per_tok")
    return experts, top_k


def _head_dim(config: dict, hidden: int, n_heads: int, source: str) -> int:
    head_dim = loading.integer(config, "head_dim", source=source, default=None)
    if head_dim is None:  # explicit in Qwen3 and newer Llama/Mistral configs, where it may differ from h/a
        if hidden % n_heads:
            raise InputError(f"hidden_size/num_attention_heads is not whole ({hidden}/{n_heads}) and no head_dim is given",
                             source=source, field="head_dim")
        head_dim = hidden // n_heads
    return head_dim


def _attention_layers(config: dict, model_type: str, source: str) -> dict:
    """``layer_types`` and ``sliding_window`` of a GQA family, as its HF implementation builds them.

    An explicit ``layer_types`` list wins.  Otherwise: Mistral and Mixtral slide every layer when
    ``sliding_window`` is set; Qwen2/Qwen3 (and their MoE) slide the layers from
    ``max_window_layers`` on when ``use_sliding_window`` is true; the others never slide.
    """
    n_layers = loading.integer(config, "num_hidden_layers", source=source)
    window = config.get("sliding_window")
    raw = config.get("layer_types")
    if raw is not None:
        if not isinstance(raw, list) or len(raw) != n_layers:
            raise InputError(f"must list one attention type per layer ({n_layers}), but got {raw!r}",
                             source=source, field="layer_types")
        unknown = sorted({t for t in raw if t not in _HF_LAYER_TYPES})
        if unknown:
            raise InputError(f"attention type(s) {', '.join(map(repr, unknown))} cannot be expressed; known: "
                             f"{', '.join(_HF_LAYER_TYPES)}. Write a model spec YAML instead; see profiles/models/",
                             source=source, field="layer_types")
        kinds = [_HF_LAYER_TYPES[t] for t in raw]
    elif model_type in ("mistral", "mixtral") and window:
        kinds = ["sliding"] * n_layers
    elif (model_type in ("qwen2", "qwen3", "qwen2_moe", "qwen3_moe") and window
          and loading.boolean(config, "use_sliding_window", source=source, default=False)):  # "false" is truthy
        first = loading.integer(config, "max_window_layers", source=source, minimum=0, default=n_layers)
        kinds = ["sliding" if i >= first else "full" for i in range(n_layers)]
    elif model_type == "gpt_oss" and window:
        raise InputError("is required: gpt_oss slides only some layers and the config does not say which",
                         source=source, field="layer_types")
    else:
        kinds = ["full"] * n_layers
    out: dict = {}
    if set(kinds) != {"full"}:
        out["layer_types"] = kinds
    if "sliding" in kinds:
        out["sliding_window"] = loading.integer(config, "sliding_window", source=source)
    return out


def _mla_family(config: dict, model_type: str, source: str) -> dict:
    """DeepSeek-V2/V3, Kimi-K2 and GLM-5 (``DeepseekV3ForCausalLM`` and relatives).

    Attention is MLA in every layer (``num_key_value_heads`` is meaningless there and ignored).
    HF makes layer ``i`` MoE iff ``n_routed_experts`` is set, ``i >= first_k_dense_replace`` and
    ``i % moe_layer_freq == 0``; the shared experts are ``n_shared_experts`` of width
    ``moe_intermediate_size``; ``num_nextn_predict_layers`` MTP modules follow the last layer.
    """
    src = dict(source=source)
    n_layers = loading.integer(config, "num_hidden_layers", **src)
    n_heads = loading.integer(config, "num_attention_heads", **src)
    mla = {
        "kv_lora_rank": loading.integer(config, "kv_lora_rank", **src),
        "qk_nope_head_dim": loading.integer(config, "qk_nope_head_dim", **src),
        "qk_rope_head_dim": loading.integer(config, "qk_rope_head_dim", **src),
        "v_head_dim": loading.integer(config, "v_head_dim", **src),
    }
    q_lora_rank = loading.integer(config, "q_lora_rank", **src, default=None)  # null: no query compression
    if q_lora_rank is not None:
        mla["q_lora_rank"] = q_lora_rank
    out: dict = {"n_heads": n_heads, "n_kv_heads": n_heads, "mla": mla,
                 "mtp_layers": loading.integer(config, "num_nextn_predict_layers", **src, minimum=0, default=0)}
    if model_type == "glm_moe_dsa":
        require_keys(config, {"index_n_heads", "index_head_dim", "index_topk"}, source=source)
        for key in ("indexer_types", "index_topk_freq"):
            value = config.get(key)
            if value not in (None, 1) and not (isinstance(value, list) and all(v == "full" for v in value)):
                raise InputError(f"layers that reuse another layer's top-k (shared indexers) cannot be expressed, "
                                 f"but got {value!r}; write a model spec YAML instead; see profiles/models/",
                                 source=source, field=key)
        out["dsa"] = {key: loading.integer(config, key, **src) for key in ("index_n_heads", "index_head_dim", "index_topk")}
    experts, top_k = _expert_pair(config, "n_routed_experts", source, default=0)  # absent: a dense model
    if experts:
        require_keys(config, {"num_experts_per_tok", "moe_intermediate_size"}, source=source)
        first = loading.integer(config, "first_k_dense_replace", **src, minimum=0, default=0)
        freq = loading.integer(config, "moe_layer_freq", **src, default=1)
        if first >= n_layers:
            raise InputError(f"first_k_dense_replace must be < num_hidden_layers (layers from first_k_dense_replace "
                             f"on hold the experts), but got (first_k_dense_replace={first}, "
                             f"num_hidden_layers={n_layers}); lower it, or set n_routed_experts to 0 for a dense model",
                             source=source, field="first_k_dense_replace")
        first_moe = -(-first // freq) * freq  # the first multiple of moe_layer_freq from first_k_dense_replace on
        if first_moe >= n_layers:
            raise InputError(f"leaves no MoE layer (a layer i is MoE iff i >= first_k_dense_replace and "
                             f"i % moe_layer_freq == 0), but got (moe_layer_freq={freq}, "
                             f"first_k_dense_replace={first}, num_hidden_layers={n_layers}); lower it, or set "
                             "n_routed_experts to 0 for a dense model",
                             source=source, field="moe_layer_freq")
        width = loading.integer(config, "moe_intermediate_size", **src)
        shared = loading.integer(config, "n_shared_experts", **src, minimum=0, default=0)
        out["moe"] = {
            "n_experts": experts,
            "top_k": top_k,
            "expert_ffn_hidden_size": width,
            "n_shared_experts": shared,
            "shared_expert_ffn_hidden_size": shared * width,
            "layer_interval": freq,
            "first_dense_layers": first_moe,
        }
        groups = loading.integer(config, "n_group", **src, default=1)
        group_topk = loading.integer(config, "topk_group", **src, default=1)
        if group_topk > groups:
            raise InputError(f"topk_group must be <= n_group (the best groups of all), but got "
                             f"(topk_group={group_topk}, n_group={groups})", source=source, field="topk_group")
        if experts % groups:
            raise InputError(f"n_group must divide n_routed_experts (the experts form equal groups), but got "
                             f"(n_group={groups}, n_routed_experts={experts})", source=source, field="n_group")
        if top_k > group_topk * (experts // groups):
            raise InputError(f"num_experts_per_tok must be <= topk_group * n_routed_experts / n_group (a token's "
                             f"experts come from its best topk_group groups), but got (num_experts_per_tok={top_k}, "
                             f"topk_group={group_topk}, n_routed_experts={experts}, n_group={groups})",
                             source=source, field="num_experts_per_tok")
        if groups > 1:  # group-limited routing (DeepSeek-V3: 8 groups, the best 4)
            out["moe"].update(routing_groups=groups, routing_group_topk=group_topk)
    return out


def _qwen3_5(config: dict, source: str) -> dict:
    """Qwen3.5 (``Qwen3_5MoeTextConfig``): Gated DeltaNet in the ``linear_attention`` layers, gated
    full attention (``attn_output_gate``) in the others, one MTP layer (``mtp_num_hidden_layers``)."""
    src = dict(source=source)
    dtype = config.get("mamba_ssm_dtype", "float32")
    state_bytes = {"float32": 4, "bfloat16": 2, "float16": 2}.get(dtype) if isinstance(dtype, str) else None
    if state_bytes is None:
        raise InputError(f"must be float32, bfloat16 or float16, but got {dtype!r}", source=source, field="mamba_ssm_dtype")
    return {
        "linear_attention": {
            "n_key_heads": loading.integer(config, "linear_num_key_heads", **src),
            "key_head_dim": loading.integer(config, "linear_key_head_dim", **src),
            "n_value_heads": loading.integer(config, "linear_num_value_heads", **src),
            "value_head_dim": loading.integer(config, "linear_value_head_dim", **src),
            "conv_kernel": loading.integer(config, "linear_conv_kernel_dim", **src),
            "recurrent_state_bytes_per_element": state_bytes,
        },
        "attention_output_gate": loading.boolean(config, "attn_output_gate", **src, default=False),
        "mtp_layers": loading.integer(config, "mtp_num_hidden_layers", **src, minimum=0, default=0),
    }


def _minimax_m2_extras(config: dict, source: str) -> dict:
    """MiniMax-M2: full softmax GQA in every layer; ``num_mtp_modules`` MTP modules of one layer each."""
    types = config.get("attn_type_list")
    if types is not None and (not isinstance(types, list) or not all(t in (0, 1) and not isinstance(t, bool)
                                                                     for t in types)):
        raise InputError(f"must be a list of each layer's attention kind (1: softmax, 0: lightning), but got "
                         f"{_short(types)}", source=source, field="attn_type_list")
    if types is not None and any(t != 1 for t in types):
        raise InputError("lightning (linear) attention layers of MiniMax-01/M1 cannot be expressed; "
                         "write a model spec YAML instead; see profiles/models/", source=source, field="attn_type_list")
    out: dict = {}
    # a boolean: "use_mtp": "false" (a string) was truthy and planned the MTP modules it meant to leave out
    if loading.boolean(config, "use_mtp", source=source, default=False):
        per_module = loading.integer(config, "mtp_transformer_layers", source=source, default=1)
        if per_module != 1:
            raise InputError(f"MTP modules of more than one transformer layer cannot be expressed, but got {per_module}",
                             source=source, field="mtp_transformer_layers")
        out["mtp_layers"] = loading.integer(config, "num_mtp_modules", source=source, minimum=0)
    return out


def _moe(config: dict, model_type: str, source: str) -> dict | None:
    if model_type in ("mixtral", "gpt_oss", "minimax_m2"):  # every layer MoE, experts as wide as intermediate_size
        experts, top_k = _expert_pair(config, "num_local_experts", source)
        if model_type == "gpt_oss" and config.get("experts_per_token") is not None:
            # gpt-oss states its top-k twice (experts_per_token for OpenAI's own code, num_experts_per_tok for
            # transformers and the engines); an edit to one of them was ignored while the other was planned
            stated = loading.integer(config, "experts_per_token", source=source, minimum=0)
            if stated != top_k:
                raise InputError(f"experts_per_token must equal num_experts_per_tok, but got (experts_per_token="
                                 f"{stated}, num_experts_per_tok={top_k}); set both to the experts each token is "
                                 "routed to", source=source, field="experts_per_token")
        if not experts:
            return None
        moe = {
            "n_experts": experts,
            "top_k": top_k,
            "expert_ffn_hidden_size": loading.integer(config, "intermediate_size", source=source),
        }
        # minimax_m2: 0 or absent = no shared expert
        shared = loading.integer(config, "shared_intermediate_size", source=source, minimum=0, default=0)
        if model_type == "minimax_m2" and shared:
            moe.update(n_shared_experts=1, shared_expert_ffn_hidden_size=shared)
        return moe
    # Qwen2-MoE / Qwen3-MoE / Qwen3.5: HF makes layer i sparse iff i is not in mlp_only_layers and
    # (i + 1) % decoder_sparse_step == 0. Our MoESpec only knows "dense prefix, then every
    # layer_interval-th layer", so derive that and refuse layouts it cannot express.
    n_layers = loading.integer(config, "num_hidden_layers", source=source)
    step = loading.integer(config, "decoder_sparse_step", source=source, default=1)
    mlp_only = config.get("mlp_only_layers")
    mlp_only = [] if mlp_only is None else mlp_only
    if not isinstance(mlp_only, list) or not all(isinstance(i, int) and not isinstance(i, bool) and 0 <= i < n_layers
                                                 for i in mlp_only):
        raise InputError(f"must be a list of layer indices (0 to num_hidden_layers - 1 = {n_layers - 1}), but got "
                         f"{_short(mlp_only)}", source=source, field="mlp_only_layers")
    experts, top_k = _expert_pair(config, "num_experts", source)
    if not experts:
        return None  # num_experts 0 (with num_experts_per_tok 0) builds a dense model in HF
    dense_only = set(mlp_only)
    moe_layers = [i for i in range(n_layers) if i not in dense_only and (i + 1) % step == 0]
    if not moe_layers:
        key = "decoder_sparse_step" if step > n_layers else "mlp_only_layers"
        raise InputError(f"leaves no MoE layer (a layer i is MoE iff i is not in mlp_only_layers and "
                         f"(i + 1) % decoder_sparse_step == 0), but got (decoder_sparse_step={step}, "
                         f"{len(dense_only)} mlp_only_layers, num_hidden_layers={n_layers}); fix it, or set "
                         "num_experts to 0 for a dense model", source=source, field=key)
    first = moe_layers[0]
    if moe_layers != list(range(first, n_layers, step)):
        raise InputError(
            f"MoE layers {_short(moe_layers)} (from mlp_only_layers={_short(mlp_only)}, decoder_sparse_step={step}) "
            "are not 'leading dense layers, then every Nth layer'; write a model spec YAML instead; see profiles/models/",
            source=source, field="mlp_only_layers",
        )
    # One always-on shared expert (qwen2_moe, Qwen3.5; with a sigmoid gate h -> 1, not counted).
    shared = loading.integer(config, "shared_expert_intermediate_size", source=source, minimum=0, default=0)
    return {
        "n_experts": experts,
        "top_k": top_k,
        "expert_ffn_hidden_size": loading.integer(config, "moe_intermediate_size", source=source),
        "n_shared_experts": 1 if shared else 0,
        "shared_expert_ffn_hidden_size": shared,
        "layer_interval": step,
        "first_dense_layers": first,
    }


def _short(value: object, limit: int = 120) -> str:
    """``repr(value)``, cut to ``limit`` characters: a list of 100,000 layer indices must not fill the terminal."""
    text = repr(value)
    return text if len(text) <= limit else text[:limit] + "..."


def _model_name(config: dict, source: str, model_type: str) -> str:
    """``_name_or_path`` basename, else the folder holding config.json (or the file name of another
    JSON file, ``org--Name.json`` read as ``name``), else the model_type.  A name with a control character
    (printed to the terminal and into launch files) is refused, naming where it came from."""
    name = _derived_name(config, source, model_type)
    if loading.has_control_character(name):
        stated = isinstance(config.get("_name_or_path"), str) and config["_name_or_path"].strip("/")
        raise InputError(f"the model's name must not hold a control character (a line break, tab or terminal "
                         f"escape), but got {name!r}; "
                         + ("fix _name_or_path" if stated else "set _name_or_path to the model's name (or rename "
                            "the folder holding config.json)"),
                         source=source, field="_name_or_path" if stated else None)
    return name


def _derived_name(config: dict, source: str, model_type: str) -> str:
    name_or_path = config.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/"):
        return PurePosixPath(name_or_path.rstrip("/")).name.lower()  # "Qwen/Qwen3-8B" -> "qwen3-8b"
    path = Path(source)
    if path.suffix == ".json" and path.name != "config.json":
        return path.stem.split("--")[-1].lower()  # "deepseek-ai--DeepSeek-V3.json" -> "deepseek-v3"
    folder = path.parent
    # In the HF cache the folder is a commit hash: models--Qwen--Qwen3-8B/snapshots/<sha>/config.json
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1].lower()
    if folder.name:
        return folder.name.lower()
    return model_type


def quantized_checkpoint(config: dict, *, source: str = "config.json") -> str | None:
    """The checkpoint format a ``config.json``'s ``quantization_config`` states (``serving.checkpoint`` names),
    or None where it states none or one autotune does not plan (:func:`unplanned_quantization` says which):
    FP8 block-scaled (DeepSeek-V3, MiniMax-M2.5), MXFP4 (gpt-oss), GPTQ and AWQ 4-bit, compressed-tensors by its
    weights' bits and type (Kimi K2.5's int4), ModelOpt by its algorithm (FP8, NVFP4).  HF's own key;
    multimodal configs nest it in ``text_config``.  A malformed one is refused, naming the field."""
    return _read_quantization(config, source)[0]


def unplanned_quantization(config: dict, *, source: str = "config.json") -> str | None:
    """What a stated ``quantization_config`` holds that autotune does not plan (the plan would take bf16
    weights, which the checkpoint is not), as a sentence fragment; None where it states none or a planned one."""
    return _read_quantization(config, source)[1]


def fp8_weight_block(config: dict, *, source: str = "config.json") -> int | None:
    """The scale block of an FP8 checkpoint's weights: ``quantization_config.weight_block_size`` ([128, 128] in
    DeepSeek-V3's and Qwen3's -FP8 exports: a scale per 128 outputs by 128 inputs; the width a split must keep whole
    is a multiple of both); None where the config states no fp8 quantization or no blocks (per-tensor or per-channel
    scales).  A malformed one is refused, naming the field."""
    quant, field = config.get("quantization_config"), "quantization_config"
    if quant is None and isinstance(config.get("text_config"), dict):
        quant, field = config["text_config"].get("quantization_config"), "text_config.quantization_config"
    if not isinstance(quant, dict) or str(quant.get("quant_method", "")).strip().lower() not in ("fp8", "fbgemm_fp8"):
        return None
    block = quant.get("weight_block_size")
    if block is None:
        return None
    if (not isinstance(block, list) or len(block) != 2
            or any(isinstance(b, bool) or not isinstance(b, int) or not 1 <= b <= 4096 for b in block)):
        raise InputError(f"must be two whole numbers from 1 to 4096 (the rows and columns a weight scale covers, "
                         f"e.g. [128, 128]), but got (weight_block_size={block!r})", source=source,
                         field=f"{field}.weight_block_size")
    # vLLM checks a column-parallel slice (gate/up outputs) against block[0] and a row-parallel one (down's inputs,
    # the same FFN width) against block[1] (validate_fp8_block_shape): a slice must hold whole blocks of both
    return math.lcm(int(block[0]), int(block[1]))


# How FP8 exports name their element format (HF's FineGrainedFP8Config "e4m3", MiniMax's torch dtype name)
FP8_FORMATS = ("e4m3", "e5m2", "e4m3fn", "float8_e4m3fn", "float8_e4m3", "float8_e5m2", "e4m3fnuz", "float8_e4m3fnuz")

# compressed-tensors weights (num_bits, type) -> the scheme serving.checkpoint names
_COMPRESSED_SCHEMES = {(4, "int"): "int4", (8, "int"): "int8", (8, "float"): "fp8", (4, "float"): "fp4"}


def _read_quantization(config: dict, source: str) -> tuple[str | None, str | None]:
    quant, field = config.get("quantization_config"), "quantization_config"
    if quant is None and isinstance(config.get("text_config"), dict):
        quant, field = config["text_config"].get("quantization_config"), "text_config.quantization_config"
    if quant is None:
        return None, None
    if not isinstance(quant, dict):
        raise InputError(f"must be a mapping (Hugging Face's quantization config), but got ({field}={quant!r})",
                         source=source, field=field)
    raw_method = quant.get("quant_method")
    if raw_method is None:  # older exports (bitsandbytes' load_in_4bit) may leave it out: said, not refused
        return None, f"{field} states no quant_method"
    if not isinstance(raw_method, str) or not raw_method.strip():
        raise InputError(f"must name the quantization method (e.g. fp8, gptq, awq, compressed-tensors, modelopt), "
                         f"but got (quant_method={raw_method!r})", source=source, field=f"{field}.quant_method")
    method = raw_method.strip().lower()
    unplanned = f"{field} states quant_method {method!r}"
    if method in ("fp8", "fbgemm_fp8"):
        fp8_weight_block(config, source=source)  # a malformed block is refused here, at the edge
        fmt = quant.get("fmt")
        if fmt is not None and str(fmt).strip().lower() not in FP8_FORMATS:
            raise InputError(f"must be an FP8 format ({', '.join(FP8_FORMATS[:2])}, ...), but got (fmt={fmt!r})",
                             source=source, field=f"{field}.fmt")
        return "fp8", None
    if method == "mxfp4":
        return "mxfp4", None
    if method in ("gptq", "awq"):
        bits = quant.get("bits", 4)
        if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 64:
            raise InputError(f"must be a whole number of bits from 1 to 64, but got (bits={bits!r})", source=source,
                             field=f"{field}.bits")
        return (method, None) if bits == 4 else (None, f"{unplanned} with {bits}-bit weights (4-bit is planned)")
    if method == "compressed-tensors":
        groups = quant.get("config_groups")
        if not isinstance(groups, dict):
            raise InputError(f"must map group names to their schemes, but got (config_groups={groups!r})", source=source,
                             field=f"{field}.config_groups")
        kinds = set()
        for name, group in groups.items():
            where = f"{field}.config_groups.{name}"
            if not isinstance(group, dict):
                raise InputError(f"must be a mapping with 'weights', but got ({name}={group!r})", source=source,
                                 field=where)
            weights = group.get("weights")
            if weights is None:
                continue  # a group that quantizes activations only
            if not isinstance(weights, dict):
                raise InputError(f"must be a mapping (num_bits, type), but got (weights={weights!r})", source=source,
                                 field=f"{where}.weights")
            bits, kind = weights.get("num_bits"), weights.get("type", "int")
            if isinstance(bits, bool) or not isinstance(bits, int) or not 1 <= bits <= 64:
                raise InputError(f"must be a whole number of bits from 1 to 64, but got (num_bits={bits!r})",
                                 source=source, field=f"{where}.weights.num_bits")
            if not isinstance(kind, str):
                raise InputError(f"must be 'int' or 'float', but got (type={kind!r})", source=source,
                                 field=f"{where}.weights.type")
            kinds.add((bits, kind))
        if len(kinds) == 1 and next(iter(kinds)) in _COMPRESSED_SCHEMES:
            return f"compressed-tensors:{_COMPRESSED_SCHEMES[next(iter(kinds))]}", None
        if not kinds:  # activations only (or nothing): the weights stay as they are
            return None, None
        stated = ", ".join(f"{b}-bit {k}" for b, k in sorted(kinds))
        return None, f"{unplanned} with {stated} weights" + (" (mixed schemes)" if len(kinds) > 1 else "")
    if method == "modelopt":
        return _modelopt(quant, unplanned, source=source, field=field)
    return None, unplanned


def _modelopt(quant: dict, unplanned: str, *, source: str, field: str) -> tuple[str | None, str | None]:
    """``quant_algo`` FP8 or NVFP4; none (null) with a ``kv_cache_quant_algo`` quantizes the KV cache only."""
    algo = quant.get("quant_algo")
    if algo is None:
        return None, None  # no weight quantization (an fp8 KV cache at most): the weights are what the plan takes
    if not isinstance(algo, str):
        raise InputError(f"must name ModelOpt's algorithm (e.g. FP8, NVFP4), but got (quant_algo={algo!r})",
                         source=source, field=f"{field}.quant_algo")
    checkpoint = {"FP8": "modelopt:fp8", "NVFP4": "modelopt:fp4"}.get(algo.upper())
    return (checkpoint, None) if checkpoint else (None, f"{unplanned} with quant_algo {algo!r}")


def modelopt_checkpoint(hf_quant: dict, *, source: str) -> tuple[str | None, str | None]:
    """A ModelOpt checkpoint's ``hf_quant_config.json`` (next to its config.json, which may state nothing):
    ``quantization.quant_algo`` FP8 or NVFP4 (NVIDIA's -FP8 / -NVFP4 checkpoints)."""
    quant = hf_quant.get("quantization")
    if not isinstance(quant, dict):
        raise InputError(f"must be a mapping with quant_algo, but got (quantization={quant!r})", source=source,
                         field="quantization")
    return _modelopt(quant, f"{source} states a ModelOpt checkpoint", source=source, field="quantization")
