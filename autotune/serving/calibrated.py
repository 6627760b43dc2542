"""Serving parameters per engine, as fitted by ``autotune calibrate`` on the bundled serving data.

Two calibrations, one per dataset (``validation.fit_silicon``, ``validation.fit_runs``):

* ``CURRENT``: vLLM, SGLang and TensorRT-LLM of late 2025 to spring 2026 (the releases the emitters
  target are of that family), fitted on the unique rows of ``autotune/data/serving_silicon.csv``.
* ``LEGACY``: TensorRT-LLM 0.9, 0.14 and 0.20, fitted on ``autotune/data/serving_runs.csv`` (their
  performance tables), used to validate those tables.

Each engine has its own fixed costs and weight-streaming rate (``estimate.ENGINE_PARAMS``); the other
parameters (kernel efficiencies, link efficiency, collective latencies, queueing) are shared by the
engines of one calibration.  ``PRIOR`` holds the documented defaults the fit starts from and is
pulled towards.  A GPU enters only through its datasheet numbers (peaks, HBM, links) and its
generation (``older_overhead`` for GPUs before Blackwell), so a GPU without measurements gets the
same parameters.

Engine properties (set from the release, not fitted): TensorRT-LLM 0.9 and older stream part of the
KV cache once per query head (``kv_reread_fraction`` 0.25): in its v0.9 static tables Mistral 7B (8 KV
heads) decodes no faster than Llama 2 7B (32 KV heads) at the same batch, though its cache is 4x smaller.
"""

from __future__ import annotations

import re
from typing import Mapping

from .engines import ENGINES, RELEASES, engine_family
from .estimate import ServingParams

PRIOR = ServingParams()
KV_REREAD_FRACTION_TRTLLM_0_9 = 0.25

# Written by `autotune calibrate autotune/data/serving_silicon.csv` (tests/test_serving_fit.py checks
# that the fit reproduces them).
CURRENT_VALUES: Mapping[str, Mapping[str, float]] = {
    "vllm": {'gemm': 0.8436, 'attention': 0.44992, 'kv_bandwidth': 0.81639, 'grouped_gemm': 0.32928, 'fp4_gemm': 0.89651, 'weight_only': 0.71648, 'link_bandwidth': 0.58791, 'allreduce_us': 8.57667, 'alltoall_us': 6.38795, 'moe_layer_us': 11.26986, 'prompt_token_us': 4.94027, 'arrival_cv2': 0.91957, 'kv_handoff_ms': 61.35205, 'transfer_poll_us': 0.005, 'older_overhead': 1.15426, 'kv_reserve': 0.44526, 'weight_bandwidth': 0.89527, 'step_us': 1.93762, 'layer_us': 54.06102, 'seq_us': 0.00552, 'seq_layer_us': 0.09661, 'request_ms': 7.85047, 'admission_steps': 2.36886, 'sync_share': 0.11353},
    "sglang": {'gemm': 0.8436, 'attention': 0.44992, 'kv_bandwidth': 0.81639, 'grouped_gemm': 0.32928, 'fp4_gemm': 0.89651, 'weight_only': 0.71648, 'link_bandwidth': 0.58791, 'allreduce_us': 8.57667, 'alltoall_us': 6.38795, 'moe_layer_us': 11.26986, 'prompt_token_us': 4.94027, 'arrival_cv2': 0.91957, 'kv_handoff_ms': 61.35205, 'transfer_poll_us': 75.31537, 'older_overhead': 1.15426, 'kv_reserve': 0.44526, 'weight_bandwidth': 0.88923, 'step_us': 1837.46077, 'layer_us': 41.20707, 'seq_us': 13.56303, 'seq_layer_us': 0.28428, 'request_ms': 111.86593, 'admission_steps': 5.91996, 'sync_share': 0.36841},
    "trtllm": {'gemm': 0.8436, 'attention': 0.44992, 'kv_bandwidth': 0.81639, 'grouped_gemm': 0.32928, 'fp4_gemm': 0.89651, 'weight_only': 0.71648, 'link_bandwidth': 0.58791, 'allreduce_us': 8.57667, 'alltoall_us': 6.38795, 'moe_layer_us': 11.26986, 'prompt_token_us': 4.94027, 'arrival_cv2': 0.91957, 'kv_handoff_ms': 61.35205, 'transfer_poll_us': 1635.86883, 'older_overhead': 1.15426, 'kv_reserve': 0.44526, 'weight_bandwidth': 0.90014, 'step_us': 354.4487, 'layer_us': 30.85693, 'seq_us': 0.00663, 'seq_layer_us': 0.44479, 'request_ms': 19.72264, 'admission_steps': 5.32684, 'sync_share': 0.13013},
}
# Written by `autotune calibrate autotune/data/serving_runs.csv`.
LEGACY_VALUES: Mapping[str, Mapping[str, float]] = {
    "trtllm-0.9": {'gemm': 0.58345, 'attention': 0.39578, 'kv_bandwidth': 0.75989, 'grouped_gemm': 0.77507, 'fp4_gemm': 0.5932, 'link_bandwidth': 0.43592, 'allreduce_us': 1.00336, 'moe_layer_us': 0.00019, 'prompt_token_us': 0.00011, 'arrival_cv2': 0.66852, 'older_overhead': 0.78139, 'weight_bandwidth': 0.87791, 'step_us': 3088.99822, 'layer_us': 68.75539, 'seq_us': 9.12205},
    "trtllm-0.14": {'gemm': 0.58345, 'attention': 0.39578, 'kv_bandwidth': 0.75989, 'grouped_gemm': 0.77507, 'fp4_gemm': 0.5932, 'link_bandwidth': 0.43592, 'allreduce_us': 1.00336, 'moe_layer_us': 0.00019, 'prompt_token_us': 0.00011, 'arrival_cv2': 0.66852, 'older_overhead': 0.78139, 'weight_bandwidth': 0.66635, 'step_us': 0.0, 'layer_us': 38.49416, 'seq_us': 0.0, 'seq_layer_us': 0.36268, 'request_ms': 1.2964, 'admission_steps': 0.38096, 'sync_share': 0.2757},
    "trtllm-0.20": {'gemm': 0.58345, 'attention': 0.39578, 'kv_bandwidth': 0.75989, 'grouped_gemm': 0.77507, 'fp4_gemm': 0.5932, 'link_bandwidth': 0.43592, 'allreduce_us': 1.00336, 'moe_layer_us': 0.00019, 'prompt_token_us': 0.00011, 'arrival_cv2': 0.66852, 'older_overhead': 0.78139, 'weight_bandwidth': 0.94933, 'step_us': 3e-05, 'layer_us': 2e-05, 'seq_us': 0.00016, 'seq_layer_us': 0.12755, 'request_ms': 7.13386, 'admission_steps': 0.1599, 'sync_share': 0.45163},
}


def _version(engine: str) -> tuple[str, tuple[int, int] | None]:
    found = re.match(r"([a-z_\-]+?)-(\d+)\.(\d+)", engine)
    if not found:
        return engine, None
    return found.group(1), (int(found.group(2)), int(found.group(3)))


def engine_properties(engine: str) -> dict:
    """Kernel properties of an engine release (module docstring): inferred from the release, not fitted."""
    name, version = _version(engine)
    if name == "trtllm" and version is not None and version <= (0, 9):
        return {"kv_reread_fraction": KV_REREAD_FRACTION_TRTLLM_0_9}
    return {}


CURRENT: Mapping[str, ServingParams] = {e: PRIOR.replace(**v) for e, v in CURRENT_VALUES.items()}
LEGACY: Mapping[str, ServingParams] = {e: PRIOR.replace(kv_reserve=1.0, **engine_properties(e), **v)
                                       for e, v in LEGACY_VALUES.items()}


def _nearest_legacy(version: tuple[int, int]) -> str:
    known = sorted((_version(k)[1], k) for k in LEGACY)
    best = min(known, key=lambda kv: abs((kv[0][0] * 100 + kv[0][1]) - (version[0] * 100 + version[1])))
    return best[1]


def params_for(engine: str, gpu: str | None = None) -> ServingParams:
    """Parameters of an engine release: its own calibration; a TensorRT-LLM 0.x release the nearest
    legacy one; vLLM, SGLang and TensorRT-LLM >= 1 the current one of their family (``gpu`` is not
    needed: the parameters are fractions of each GPU's own peaks and latencies)."""
    key = engine[: -len("-triton")] if engine.endswith("-triton") else engine
    if key in LEGACY:
        return LEGACY[key]
    name, version = _version(key)
    if name == "trtllm" and version is not None and version[0] < 1:
        return LEGACY[_nearest_legacy(version)].replace(**engine_properties(key))
    return CURRENT[engine_family(key)]


def parameters_note(overlay: bool = False, engine: str | None = None) -> str:
    if overlay:
        return "serving parameters from the --calibration overlay"
    if engine:
        return (f"serving parameters of {RELEASES[engine]}, fitted on measured vLLM, SGLang and TensorRT-LLM "
                "operating points (autotune/data/serving_silicon.csv)")
    return "serving parameters per engine, fitted on autotune/data/serving_silicon.csv"


def aggregated_only(release: str | None) -> bool:
    """TensorRT-LLM 0.x: its parameters come from aggregated tables (serving_runs.csv), and its releases before
    the PyTorch backend's disaggregated serving are planned aggregated only."""
    if release is None:
        return False
    name, version = _version(release)
    return name == "trtllm" and version is not None and version[0] < 1


def release_name(release: str) -> str:
    """``trtllm-0.14`` as a user writes it: ``trtllm@0.14``."""
    name, version = _version(release)
    return f"{name}@{version[0]}.{version[1]}" if version else release


def release_note(release: str) -> str:
    """Where the parameters of an engine release (``trtllm-0.14``, ``vllm-0.12``) come from."""
    name, version = _version(release)
    label = RELEASES[engine_family(release)].split(" ")[0] + (f" {version[0]}.{version[1]}" if version else "")
    if name == "trtllm" and version is not None and version[0] < 1:
        fitted = release if release in LEGACY else _nearest_legacy(version)
        which = "" if fitted == release else f" (the nearest fitted release, for {label})"
        return (f"serving parameters of TensorRT-LLM {fitted.split('-')[1]}{which}, fitted on its performance "
                "tables (autotune/data/serving_runs.csv)")
    return (f"serving parameters of {label}: its engine's one calibration for its 2025-26 releases, fitted on measured "
            "vLLM, SGLang and TensorRT-LLM operating points (autotune/data/serving_silicon.csv)")


def params_table(engines=ENGINES) -> dict[str, ServingParams]:
    return {e: CURRENT[e] for e in engines}
