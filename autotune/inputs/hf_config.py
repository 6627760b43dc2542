"""Turn a Hugging Face ``config.json`` into a model-spec mapping (see profiles/models/*.yaml).

Only families whose layout we know exactly are accepted: a decoder-only transformer with
RMSNorm, RoPE and a gated (3-matrix) MLP, optionally with Mixtral- or Qwen-style experts.
Anything else is refused rather than guessed, because a wrong shape gives wrong plans
silently; the error points to writing a spec YAML by hand.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

from ..errors import InputError, require_keys
from . import loading

DENSE_TYPES = ("llama", "mistral", "qwen2", "qwen3")
MOE_TYPES = ("mixtral", "qwen2_moe", "qwen3_moe")
SUPPORTED_TYPES = DENSE_TYPES + MOE_TYPES

_REQUIRED = ("num_hidden_layers", "hidden_size", "intermediate_size", "num_attention_heads", "vocab_size")
_MOE_REQUIRED = {
    "mixtral": ("num_local_experts", "num_experts_per_tok"),
    "qwen2_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
    "qwen3_moe": ("num_experts", "num_experts_per_tok", "moe_intermediate_size"),
}


def spec_mapping_from_hf(config: dict, *, source: str) -> dict:
    """The spec mapping (input of ``model_from_mapping``) for an HF ``config.json`` dict."""
    # Multimodal wrappers (Llava, Mistral3, ...) keep the language model under text_config.
    text_config = config.get("text_config")
    if isinstance(text_config, dict):
        config = {"_name_or_path": config.get("_name_or_path"), **text_config}

    require_keys(config, {"model_type"}, source=source)
    model_type = config["model_type"]
    if model_type not in SUPPORTED_TYPES:
        raise InputError(
            f"unsupported model_type {model_type!r}; supported: {', '.join(SUPPORTED_TYPES)}. "
            "Write a model spec YAML instead; see profiles/models/",
            source=source, field="model_type",
        )
    require_keys(config, set(_REQUIRED) | set(_MOE_REQUIRED.get(model_type, ())), source=source)

    hidden = loading.integer(config, "hidden_size", source=source)
    n_heads = loading.integer(config, "num_attention_heads", source=source)
    head_dim = config.get("head_dim")
    if head_dim is None:  # explicit in Qwen3 and newer Llama/Mistral configs, where it may differ from h/a
        if hidden % n_heads:
            raise InputError(f"hidden_size/num_attention_heads is not whole ({hidden}/{n_heads}) and no head_dim is given",
                             source=source, field="head_dim")
        head_dim = hidden // n_heads

    spec = {
        "name": _model_name(config, source, model_type),
        "description": f"converted from a Hugging Face config.json (model_type {model_type})",
        "source": source,
        "n_layers": config["num_hidden_layers"],
        "hidden_size": hidden,
        # The width of a dense MLP layer. In Mixtral every layer is MoE and this is also the expert
        # width; in Qwen MoE it is the width of the dense layers (mlp_only_layers / skipped by
        # decoder_sparse_step), while the expert width is moe_intermediate_size.
        "ffn_hidden_size": config["intermediate_size"],
        "n_heads": n_heads,
        "n_kv_heads": config.get("num_key_value_heads") or n_heads,  # absent or null means MHA
        "head_dim": head_dim,
        "vocab_size": config["vocab_size"],
        # All supported families use a gated MLP (gate, up, down); the activation (silu) does not
        # change the matrix count, which is what "swiglu" stands for here.
        "mlp": "swiglu",
        "tied_embeddings": config.get("tie_word_embeddings", False),  # the loader checks it is a bool
        "max_seq_len": config.get("max_position_embeddings"),
        "norm": "rmsnorm",
        "position_embedding": "rope",
        # HF configs carry attention_dropout = 0.0 for these models; honour a non-zero one.
        "dropout": bool(config.get("attention_dropout") or 0),
    }
    if model_type in MOE_TYPES:
        moe = _moe(config, model_type, source)
        if moe is not None:
            spec["moe"] = moe
    return spec


def _moe(config: dict, model_type: str, source: str) -> dict | None:
    if model_type == "mixtral":  # every layer MoE, experts as wide as intermediate_size
        return {
            "n_experts": config["num_local_experts"],
            "top_k": config["num_experts_per_tok"],
            "expert_ffn_hidden_size": config["intermediate_size"],
        }
    # Qwen2-MoE / Qwen3-MoE: HF makes layer i sparse iff i is not in mlp_only_layers and
    # (i + 1) % decoder_sparse_step == 0. Our MoESpec only knows "dense prefix, then every
    # layer_interval-th layer", so derive that and refuse layouts it cannot express.
    n_layers = loading.integer(config, "num_hidden_layers", source=source)
    step = loading.integer(config, "decoder_sparse_step", source=source, default=1)
    mlp_only = config.get("mlp_only_layers") or []
    if not isinstance(mlp_only, list):
        raise InputError(f"must be a list of layer indices, but got {mlp_only!r}", source=source, field="mlp_only_layers")
    if not config["num_experts"]:
        return None  # num_experts 0 builds a dense model in HF
    moe_layers = [i for i in range(n_layers) if i not in mlp_only and (i + 1) % step == 0]
    if not moe_layers:
        return None
    first = moe_layers[0]
    if moe_layers != list(range(first, n_layers, step)):
        raise InputError(
            f"MoE layers {moe_layers} (from mlp_only_layers={mlp_only}, decoder_sparse_step={step}) are not "
            "'leading dense layers, then every Nth layer'; write a model spec YAML instead; see profiles/models/",
            source=source, field="mlp_only_layers",
        )
    shared = config.get("shared_expert_intermediate_size") or 0  # qwen2_moe only: one always-on expert
    return {
        "n_experts": config["num_experts"],
        "top_k": config["num_experts_per_tok"],
        "expert_ffn_hidden_size": config["moe_intermediate_size"],
        "n_shared_experts": 1 if shared else 0,
        "shared_expert_ffn_hidden_size": shared,
        "layer_interval": step,
        "first_dense_layers": first,
    }


def _model_name(config: dict, source: str, model_type: str) -> str:
    """``_name_or_path`` basename, else the folder holding config.json, else the model_type."""
    name_or_path = config.get("_name_or_path")
    if isinstance(name_or_path, str) and name_or_path.strip("/"):
        return PurePosixPath(name_or_path.rstrip("/")).name.lower()  # "Qwen/Qwen3-8B" -> "qwen3-8b"
    folder = Path(source).parent
    # In the HF cache the folder is a commit hash: models--Qwen--Qwen3-8B/snapshots/<sha>/config.json
    if folder.parent.name == "snapshots" and folder.parent.parent.name.startswith("models--"):
        return folder.parent.parent.name.split("--")[-1].lower()
    if folder.name:
        return folder.name.lower()
    return model_type
