"""Checkpoints: which weight precisions a checkpoint holds, and which an engine makes from bf16 at load.

``--checkpoint`` names the weights the user has (default bf16, or the format the catalogue records for a
Hugging Face id).  A plan's ``weights`` is runnable from it when the checkpoint holds that precision
(the engine reads the scheme from the checkpoint's config and no ``--quantization`` flag is needed), or
when the checkpoint is bf16 and the engine quantises it at load (online: vLLM 0.33 ``fp8_per_tensor``, SGLang
0.5.23 ``fp8``; NVFP4 only for a MoE model's experts on Blackwell: vLLM ``nvfp4_per_token``, SGLang
``nvfp4_online``; a dense model's NVFP4 needs a checkpoint).  Otherwise the plan needs
a pre-quantized checkpoint, and says which (``requirement``).
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any, Mapping

from .engines import engine_family

CHECKPOINTS = ("bf16", "fp8", "nvfp4", "mxfp4", "awq", "gptq", "compressed-tensors", "modelopt")
# The weight precision each checkpoint format holds.  compressed-tensors and ModelOpt are containers for
# several schemes, and a checkpoint holds exactly one: ``--checkpoint compressed-tensors:int4`` names it;
# the bare name means the container's most common scheme (compressed-tensors: FP8, as in the FP8-dynamic
# and Meta's official FP8 checkpoints; ModelOpt: NVFP4, as in NVIDIA's -FP4 checkpoints).
SCHEMES: Mapping[str, tuple[str, ...]] = {"compressed-tensors": ("fp8", "int8", "int4", "fp4"),
                                         "modelopt": ("fp4", "fp8")}
HOLDS: Mapping[str, frozenset] = {
    "bf16": frozenset({"bf16"}),
    "fp8": frozenset({"fp8"}),
    "nvfp4": frozenset({"fp4"}),
    "mxfp4": frozenset({"mxfp4"}),
    "awq": frozenset({"int4"}),
    "gptq": frozenset({"int4"}),
    **{f"{fmt}:{scheme}": frozenset({scheme}) for fmt, schemes in SCHEMES.items() for scheme in schemes},
}
# Weight precisions an engine makes from a bf16 checkpoint at load (online quantization), and the
# precisions that need Blackwell's FP4 tensor cores to do so.
ONLINE: Mapping[str, frozenset] = {"vllm": frozenset({"fp8", "fp4"}), "sglang": frozenset({"fp8", "fp4"}),
                                   "trtllm": frozenset()}
# The checkpoint formats that carry each precision, for the message.
SOURCES: Mapping[str, str] = {
    "bf16": "a bf16 checkpoint",
    "fp8": "an fp8 checkpoint (fp8, compressed-tensors or modelopt)",
    "int8": "an int8 W8A8 checkpoint (compressed-tensors)",
    "int4": "an int4 checkpoint (awq, gptq or compressed-tensors)",
    "fp4": "an NVFP4 checkpoint (nvfp4, modelopt or compressed-tensors)",
    "mxfp4": "an MXFP4 checkpoint (mxfp4, e.g. gpt-oss)",
}
# The catalogue's record of a Hugging Face repository's weights -> a --checkpoint value.
FROM_CATALOGUE: Mapping[str, str] = {"bf16": "bf16", "fp8": "fp8", "nvfp4": "nvfp4", "mxfp4": "mxfp4",
                                     "int4": "compressed-tensors:int4"}


@lru_cache(maxsize=128)  # how() calls it once per ranked plan
def check_checkpoint(name: str) -> str:
    """The checkpoint named, normalised: a container format carries its scheme (``compressed-tensors:fp8``)."""
    key = name.strip().lower()
    fmt, colon, scheme = key.partition(":")
    if fmt in SCHEMES:
        if colon and not scheme:  # 'compressed-tensors:' is a scheme left out, not the bare container
            raise ValueError(f"a {fmt} checkpoint names its scheme after the colon, one of {', '.join(SCHEMES[fmt])}, "
                             f"but got ({name!r}); e.g. {fmt}:{SCHEMES[fmt][0]}, or {fmt} alone for "
                             f"{SCHEMES[fmt][0]}")
        scheme = scheme or SCHEMES[fmt][0]
        if scheme not in SCHEMES[fmt]:
            raise ValueError(f"a {fmt} checkpoint holds one of {', '.join(SCHEMES[fmt])}, but got ({name!r}); "
                             f"e.g. {fmt}:{SCHEMES[fmt][0]}")
        return f"{fmt}:{scheme}"
    if key not in CHECKPOINTS:
        raise ValueError(f"checkpoint must be one of {', '.join(CHECKPOINTS)} (compressed-tensors:SCHEME and "
                         f"modelopt:SCHEME name the scheme), but got ({name!r})")
    return key


def held_weights(checkpoint: str) -> str:
    """The weight precision a checkpoint holds (``compressed-tensors:int4`` -> ``int4``; a MoE model's 4-bit
    checkpoint quantizes its experts, ``arch.class_formats``): what a plan that states no weights runs."""
    held = HOLDS[check_checkpoint(checkpoint)]
    if len(held) != 1:  # every format holds one precision (a container names its scheme)
        raise ValueError(f"a checkpoint holds one weight precision, but {checkpoint!r} holds {sorted(held)}")
    return next(iter(held))


def with_held_weights(fields: Any, checkpoint: str) -> Any:
    """Plan fields (a ``--plan`` string's or a plans.json entry's) whose weights, left out, are the checkpoint's:
    the engine loads what the checkpoint holds unless told to quantize.  Anything but a mapping passes through
    (the plan's reader says what is wrong with it)."""
    if isinstance(fields, Mapping) and "weights" not in fields:
        return {**fields, "weights": held_weights(checkpoint)}
    return fields


def checkpoint_format(checkpoint: str) -> str:
    """The file format of a checkpoint (``compressed-tensors:int4`` -> ``compressed-tensors``)."""
    return checkpoint.partition(":")[0]


MOE_ONLY_ONLINE = frozenset({"fp4"})  # the engines' online NVFP4 quantizes MoE experts only
FP4_CORES_ONLINE = frozenset({"fp4"})  # ... and only on a GPU with FP4 tensor cores (Blackwell)


def how(weights: str, checkpoint: str, engine: str, is_moe: bool = True, *, fp4_cores: bool) -> str:
    """``checkpoint`` (read from it), ``online`` (quantized at load) or ``needs`` (another checkpoint).
    ``fp4_cores``: the GPU has FP4 tensor cores; the engines quantize to NVFP4 at load only there (on Hopper an
    NVFP4 checkpoint runs weight-only, but no engine makes one from bf16)."""
    if weights in HOLDS[check_checkpoint(checkpoint)]:
        return "checkpoint"
    if (checkpoint == "bf16" and weights in ONLINE[engine_family(engine)] and (is_moe or weights not in MOE_ONLY_ONLINE)
            and (fp4_cores or weights not in FP4_CORES_ONLINE)):
        return "online"
    return "needs"


def requirement(weights: str, checkpoint: str, engine: str, is_moe: bool = True, *, fp4_cores: bool) -> str | None:
    """None when the plan runs from ``checkpoint``; else what it needs, as a sentence fragment."""
    if how(weights, checkpoint, engine, is_moe, fp4_cores=fp4_cores) != "needs":
        return None
    return f"needs {SOURCES[weights]}; --checkpoint is {checkpoint}"


def default_checkpoint(model_name: str) -> str:
    """The checkpoint a --model names: the catalogue's record for a Hugging Face id; for a ``config.json`` the
    format its ``quantization_config`` states, or a ModelOpt ``hf_quant_config.json`` beside it (an FP8
    checkpoint's config says so; planning it as bf16 would double its weights); else bf16."""
    from ..inputs.catalogue import lookup_hf_id

    stated = _stated_quantization(model_name)
    if stated is not None:
        return stated[0] or "bf16"
    entry = lookup_hf_id(model_name) if "/" in model_name else None
    if entry is not None and entry.checkpoint:
        return FROM_CATALOGUE.get(entry.checkpoint, "bf16")
    return "bf16"


def checkpoint_conflict_note(model_name: str | None, checkpoint: str | None) -> str | None:
    """Where ``--model`` names weights (a Hugging Face id the catalogue records, or a config.json that states its
    quantization) and ``--checkpoint`` names weights of another precision: the plans are the checkpoint's, and the
    launch must not load the id's (Qwen/Qwen3-235B-A22B-FP8 with --checkpoint awq: vLLM would load 27 GiB of FP8 per
    GPU where the plan counted 15.5 of int4).  None where they agree, or the model names no weights."""
    from ..inputs.catalogue import lookup_hf_id

    if not model_name or checkpoint is None:
        return None
    stated = _stated_quantization(model_name)
    if stated is not None:
        recorded = stated[0]
    else:
        entry = lookup_hf_id(model_name) if "/" in model_name else None
        if entry is None:
            return None
        recorded = FROM_CATALOGUE.get(entry.checkpoint, "bf16") if entry.checkpoint else "bf16"
    if recorded is None or HOLDS[check_checkpoint(recorded)] == HOLDS[check_checkpoint(checkpoint)]:
        return None
    held, given = held_weights(recorded), held_weights(checkpoint)
    held_text = held if held == recorded else f"{held} ({recorded})"
    return (f"{model_name} holds {held_text} weights, but --checkpoint {checkpoint} names {given} weights: the plans "
            "are for --checkpoint's weights, so a launch must load those, not this id's (emit leaves MODEL for you to "
            "set, or takes --model-path)")


def unplanned_checkpoint_note(model_name: str) -> str | None:
    """Why the weights are planned as bf16 though the config states a quantization autotune does not plan
    (bitsandbytes, GPTQ 8-bit, mixed compressed-tensors groups, ...): the user should say with --checkpoint."""
    stated = _stated_quantization(model_name)
    if stated is None or stated[1] is None:
        return None
    return (f"{stated[1]}, which autotune does not plan: the weights are planned as bf16; give --checkpoint "
            f"({', '.join(CHECKPOINTS)}) for what they are")


def published_checkpoint_note(model_name: str) -> str | None:
    """A bundled model name is planned from bf16 weights; where every published checkpoint the catalogue records
    for its architecture is quantized (gpt-oss: MXFP4, DeepSeek-V3: FP8), say so: the plans would otherwise assume
    weights the user does not download (None: a Hugging Face id, a file, or a model published in bf16)."""
    from pathlib import Path

    from ..inputs.catalogue import catalogue

    if "/" in model_name or "\\" in model_name or Path(model_name).suffix in (".yaml", ".yml", ".json"):
        return None
    entries = [e for e in catalogue().values() if e.spec == model_name]
    if not entries or any((e.checkpoint or "bf16") == "bf16" for e in entries):
        return None
    first = entries[0]
    given = FROM_CATALOGUE.get(first.checkpoint, first.checkpoint)
    return (f"{model_name} is planned from bf16 weights (a bundled name's default), but its published checkpoint "
            f"{first.hf_id} holds {first.checkpoint} weights: give -m {first.hf_id} or --checkpoint {given} to plan "
            "those")


def fp8_scale_block(model) -> int | None:
    """The scale block of the fp8 checkpoint a model's weights are read from: what its own ``config.json`` states
    (``weight_block_size``; none: per-tensor scales) where the model came from one, else the catalogue's record for
    its architecture (``fp8_block_of``)."""
    from pathlib import Path

    from ..inputs import loading
    from ..inputs.catalogue import fp8_block_of
    from ..inputs.hf_config import fp8_weight_block

    path = Path(model.source) if model.source and len(model.source) < 4096 else None
    if path is not None and path.suffix == ".json" and path.is_file():
        return fp8_weight_block(loading.read_mapping(path), source=str(path))
    return fp8_block_of(model.name)


# Architectures whose published repositories ship their own code the engines load only with --trust-remote-code:
# Kimi's tokenizer (tokenization_kimi.py, named in its tokenizer_config.json), MiniMax-M2's model files (its Hub
# tag custom_code); their model cards' launch commands pass the flag.  An auto_map alone does not make a model one:
# DeepSeek-V3's config.json has one, and vLLM and SGLang run it natively.
REMOTE_CODE_MODEL_TYPES = frozenset({"kimi_k2", "kimi_k25", "minimax_m2"})


def needs_remote_code(model, model_path: str | None = None) -> bool:
    """The engines load this model only with ``--trust-remote-code``: the catalogue records it for the repository
    named (``model_path``) or for the architecture's published checkpoints (``remote_code``), or a given config.json
    (or a checkpoint folder's) is of such an architecture (``REMOTE_CODE_MODEL_TYPES``).  Whether the model is named
    by its Hugging Face id, its bundled name or its config.json, the answer is the same."""
    from pathlib import Path

    from ..inputs import loading
    from ..inputs.catalogue import catalogue, lookup_hf_id

    entry = lookup_hf_id(model_path) if model_path else None
    if entry is not None and entry.remote_code:
        return True
    if any(e.remote_code for e in catalogue().values() if e.spec == model.name):
        return True
    path = Path(model.source) if model.source and len(model.source) < 4096 else None
    if path is not None and path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"  # a checkpoint folder
    if path is not None and path.suffix == ".json" and path.is_file():
        config = loading.read_mapping(path)
        inner = config.get("text_config") if isinstance(config.get("text_config"), dict) else {}
        return bool({config.get("model_type"), inner.get("model_type")} & REMOTE_CODE_MODEL_TYPES)
    return False


def _stated_quantization(model_name: str) -> tuple[str | None, str | None] | None:
    """(checkpoint, unplanned note) a config.json (or a folder holding one) states; None: not a config file."""
    from pathlib import Path

    from ..inputs import loading
    from ..inputs.hf_config import modelopt_checkpoint, quantized_checkpoint, unplanned_quantization

    path = Path(model_name)
    if path.is_dir() and (path / "config.json").is_file():
        path = path / "config.json"
    if path.suffix != ".json" or not path.is_file():
        return None
    config = loading.read_mapping(path)
    checkpoint, note = quantized_checkpoint(config, source=str(path)), unplanned_quantization(config, source=str(path))
    beside = _quant_sidecar(path)
    if checkpoint is None and note is None and beside is not None:
        return modelopt_checkpoint(loading.read_mapping(beside), source=str(beside))
    return checkpoint, note


def _quant_sidecar(path):
    """The ModelOpt ``hf_quant_config.json`` of a config file: the one named after it (a copied config keeps its
    sidecar by name: ``X.json`` beside ``X.hf_quant_config.json`` or ``X_hf_quant_config.json``, AIConfigurator's
    ``X_config.json`` beside ``X_hf_quant_config.json``), else the checkpoint folder's own; None if there is none."""
    stem = path.stem
    named = [f"{stem}.hf_quant_config.json", f"{stem}_hf_quant_config.json"]
    if stem.endswith("_config"):
        named.append(f"{stem[:-len('_config')]}_hf_quant_config.json")
    for candidate in [path.with_name(n) for n in named] + [path.parent / "hf_quant_config.json"]:
        if candidate != path and candidate.is_file():
            return candidate
    return None
