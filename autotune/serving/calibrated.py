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
    "vllm": {'gemm': 0.84974, 'attention': 0.39139, 'kv_bandwidth': 0.85352, 'grouped_gemm': 0.33196, 'fp4_gemm': 0.94933, 'weight_only': 0.80996, 'link_bandwidth': 0.67241, 'allreduce_us': 10.92338, 'alltoall_us': 10.45409, 'moe_layer_us': 23.92101, 'prompt_token_us': 4.83258, 'arrival_cv2': 0.69932, 'kv_handoff_ms': 71.69633, 'older_overhead': 1.12594, 'kv_reserve': 0.55317, 'weight_bandwidth': 0.88701, 'step_us': 1e-05, 'layer_us': 48.18219, 'seq_us': 0.00062, 'request_ms': 1.8917, 'admission_steps': 4.25606, 'sync_share': 0.10725},
    "sglang": {'gemm': 0.84974, 'attention': 0.39139, 'kv_bandwidth': 0.85352, 'grouped_gemm': 0.33196, 'fp4_gemm': 0.94933, 'weight_only': 0.80996, 'link_bandwidth': 0.67241, 'allreduce_us': 10.92338, 'alltoall_us': 10.45409, 'moe_layer_us': 23.92101, 'prompt_token_us': 4.83258, 'arrival_cv2': 0.69932, 'kv_handoff_ms': 71.69633, 'older_overhead': 1.12594, 'kv_reserve': 0.55317, 'weight_bandwidth': 0.89879, 'step_us': 1074.38991, 'layer_us': 39.90729, 'seq_us': 29.28339, 'request_ms': 103.37119, 'admission_steps': 10.05156, 'sync_share': 0.36941},
    "trtllm": {'gemm': 0.84974, 'attention': 0.39139, 'kv_bandwidth': 0.85352, 'grouped_gemm': 0.33196, 'fp4_gemm': 0.94933, 'weight_only': 0.80996, 'link_bandwidth': 0.67241, 'allreduce_us': 10.92338, 'alltoall_us': 10.45409, 'moe_layer_us': 23.92101, 'prompt_token_us': 4.83258, 'arrival_cv2': 0.69932, 'kv_handoff_ms': 71.69633, 'older_overhead': 1.12594, 'kv_reserve': 0.55317, 'weight_bandwidth': 0.94332, 'step_us': 3.55505, 'layer_us': 37.50779, 'seq_us': 24.43971, 'request_ms': 18.56253, 'admission_steps': 6.56777, 'sync_share': 0.13084},
}
# Written by `autotune calibrate autotune/data/serving_runs.csv`.
LEGACY_VALUES: Mapping[str, Mapping[str, float]] = {
    "trtllm-0.9": {'gemm': 0.61535, 'attention': 0.65177, 'kv_bandwidth': 0.72792, 'grouped_gemm': 0.86449, 'fp4_gemm': 0.60188, 'link_bandwidth': 0.44198, 'allreduce_us': 1.0104, 'moe_layer_us': 0.0, 'prompt_token_us': 0.0002, 'arrival_cv2': 2.02591, 'older_overhead': 0.55469, 'weight_bandwidth': 0.88377, 'step_us': 4983.89642, 'layer_us': 81.16863, 'seq_us': 13.86884},
    "trtllm-0.14": {'gemm': 0.61535, 'attention': 0.65177, 'kv_bandwidth': 0.72792, 'grouped_gemm': 0.86449, 'fp4_gemm': 0.60188, 'link_bandwidth': 0.44198, 'allreduce_us': 1.0104, 'moe_layer_us': 0.0, 'prompt_token_us': 0.0002, 'arrival_cv2': 2.02591, 'older_overhead': 0.55469, 'weight_bandwidth': 0.71081, 'step_us': 2e-05, 'layer_us': 79.84863, 'seq_us': 14.33861, 'request_ms': 1.05141, 'admission_steps': 0.41073, 'sync_share': 0.33107},
    "trtllm-0.20": {'gemm': 0.61535, 'attention': 0.65177, 'kv_bandwidth': 0.72792, 'grouped_gemm': 0.86449, 'fp4_gemm': 0.60188, 'link_bandwidth': 0.44198, 'allreduce_us': 1.0104, 'moe_layer_us': 0.0, 'prompt_token_us': 0.0002, 'arrival_cv2': 2.02591, 'older_overhead': 0.55469, 'weight_bandwidth': 0.95, 'step_us': 2e-05, 'layer_us': 0.0, 'seq_us': 9.89232, 'request_ms': 14.94296, 'admission_steps': 1.4137, 'sync_share': 0.01969},
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


def params_table(engines=ENGINES) -> dict[str, ServingParams]:
    return {e: CURRENT[e] for e in engines}
