"""Serving parameters per engine, as fitted by ``autotune calibrate`` on the bundled serving data.

Two calibrations, one per dataset (``validation.fit_silicon``, ``validation.fit_runs``):

* ``CURRENT``: vLLM, SGLang and TensorRT-LLM of late 2025 to spring 2026 (the releases the emitters
  target are of that family), fitted on the unique rows of ``autotune/data/serving_silicon.csv``.
* ``LEGACY``: TensorRT-LLM 0.9, 0.14 and 0.20, fitted on ``autotune/data/serving_runs.csv`` (their
  performance tables), used to validate those tables.

Each engine has its own fixed costs and weight-streaming rate (``estimate.ENGINE_PARAMS``); the other
parameters (kernel efficiencies, link efficiency, collective latencies, queueing) are shared by the
engines of one calibration.  ``PRIOR`` holds the documented defaults the fit starts from and is
pulled towards.  A GPU enters only through its datasheet numbers (peaks, HBM, links), its measured
GEMM ceiling (its profile's ``reference_efficiency.gemm``) and its generation (``older_overhead`` for GPUs
before Blackwell), so a GPU without serving measurements gets the same parameters.

Engine properties (set from the release, not fitted): TensorRT-LLM 0.9 and older stream part of the
KV cache once per query head (``kv_reread_fraction`` 0.25): in its v0.9 static tables Mistral 7B (8 KV
heads) decodes no faster than Llama 2 7B (32 KV heads) at the same batch, though its cache is 4x smaller.
"""

from __future__ import annotations

import re
from typing import Mapping

from .engines import ENGINES, RELEASE_SPAN, RELEASES, engine_family
from .estimate import ServingParams

PRIOR = ServingParams()
KV_REREAD_FRACTION_TRTLLM_0_9 = 0.25

# Written by `autotune calibrate autotune/data/serving_silicon.csv` (tests/test_serving_silicon.py checks
# that the fit reproduces them).
CURRENT_VALUES: Mapping[str, Mapping[str, float]] = {
    "vllm": {'gemm': 1.0, 'attention': 0.46345, 'kv_bandwidth': 0.90251, 'grouped_gemm': 0.30497, 'fp4_gemm': 0.94263, 'weight_only': 0.75611, 'link_bandwidth': 0.59224, 'allreduce_us': 5.26644, 'alltoall_us': 2.02147, 'moe_layer_us': 12.85039, 'prompt_token_us': 3.52374, 'arrival_cv2': 0.78712, 'kv_handoff_ms': 72.66324, 'transfer_poll_us': 0.005, 'older_overhead': 1.14455, 'kv_reserve': 0.61346, 'weight_bandwidth': 0.8823, 'step_us': 0.0, 'layer_us': 59.43261, 'seq_us': 0.0, 'seq_layer_us': 0.13372, 'request_ms': 11.79599, 'admission_steps': 2.7189, 'sync_share': 0.11461},
    "sglang": {'gemm': 1.0, 'attention': 0.46345, 'kv_bandwidth': 0.90251, 'grouped_gemm': 0.30497, 'fp4_gemm': 0.94263, 'weight_only': 0.75611, 'link_bandwidth': 0.59224, 'allreduce_us': 5.26644, 'alltoall_us': 2.02147, 'moe_layer_us': 12.85039, 'prompt_token_us': 3.52374, 'arrival_cv2': 0.78712, 'kv_handoff_ms': 72.66324, 'transfer_poll_us': 0.0, 'older_overhead': 1.14455, 'kv_reserve': 0.61346, 'weight_bandwidth': 0.82414, 'step_us': 1514.1846, 'layer_us': 47.46134, 'seq_us': 23.12369, 'seq_layer_us': 0.05945, 'request_ms': 68.70751, 'admission_steps': 12.54971, 'sync_share': 0.41309},
    "trtllm": {'gemm': 1.0, 'attention': 0.46345, 'kv_bandwidth': 0.90251, 'grouped_gemm': 0.30497, 'fp4_gemm': 0.94263, 'weight_only': 0.75611, 'link_bandwidth': 0.59224, 'allreduce_us': 5.26644, 'alltoall_us': 2.02147, 'moe_layer_us': 12.85039, 'prompt_token_us': 3.52374, 'arrival_cv2': 0.78712, 'kv_handoff_ms': 72.66324, 'transfer_poll_us': 1409.12255, 'older_overhead': 1.14455, 'kv_reserve': 0.61346, 'weight_bandwidth': 0.90994, 'step_us': 396.94097, 'layer_us': 37.62088, 'seq_us': 0.0, 'seq_layer_us': 0.43106, 'request_ms': 10.58837, 'admission_steps': 8.14866, 'sync_share': 0.12807},
}
# Written by `autotune calibrate autotune/data/serving_runs.csv`.
LEGACY_VALUES: Mapping[str, Mapping[str, float]] = {
    "trtllm-0.9": {'gemm': 0.74493, 'attention': 0.55234, 'kv_bandwidth': 0.77016, 'grouped_gemm': 0.76709, 'fp4_gemm': 0.66749, 'link_bandwidth': 0.4633, 'allreduce_us': 6.7137, 'moe_layer_us': 5.66116, 'prompt_token_us': 1e-05, 'arrival_cv2': 0.0, 'older_overhead': 0.68761, 'weight_bandwidth': 0.87087, 'step_us': 3852.6807, 'layer_us': 69.49232, 'seq_us': 11.63869},
    "trtllm-0.14": {'gemm': 0.74493, 'attention': 0.55234, 'kv_bandwidth': 0.77016, 'grouped_gemm': 0.76709, 'fp4_gemm': 0.66749, 'link_bandwidth': 0.4633, 'allreduce_us': 6.7137, 'moe_layer_us': 5.66116, 'prompt_token_us': 1e-05, 'arrival_cv2': 0.0, 'older_overhead': 0.68761, 'weight_bandwidth': 0.66125, 'step_us': 1.1113, 'layer_us': 46.17765, 'seq_us': 0.00253, 'seq_layer_us': 0.43673, 'request_ms': 2.51414, 'admission_steps': 0.20774, 'sync_share': 0.7959},
    "trtllm-0.20": {'gemm': 0.74493, 'attention': 0.55234, 'kv_bandwidth': 0.77016, 'grouped_gemm': 0.76709, 'fp4_gemm': 0.66749, 'link_bandwidth': 0.4633, 'allreduce_us': 6.7137, 'moe_layer_us': 5.66116, 'prompt_token_us': 1e-05, 'arrival_cv2': 0.0, 'older_overhead': 0.68761, 'weight_bandwidth': 0.90996, 'step_us': 0.0247, 'layer_us': 0.00333, 'seq_us': 9e-05, 'seq_layer_us': 0.14489, 'request_ms': 0.09906, 'admission_steps': 8e-05, 'sync_share': 0.94037},
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


def parameters_note(overlay: bool | str = False, engine: str | None = None) -> str:
    """Where the serving parameters come from; ``overlay`` the --calibration file's name (True: unnamed), which
    search prints and plans.json keeps, so the report of a calibrated search says which fit it shows."""
    if overlay:
        named = f" {overlay}" if isinstance(overlay, str) else ""
        return f"serving parameters from the --calibration overlay{named}"
    if engine:  # the release the emitters target, said as a stated one is (vllm and vllm@0.33 read the same)
        newest = RELEASE_SPAN[engine][1]
        return release_note(f"{engine}-{newest[0]}.{newest[1]}")
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


# The releases (MAJOR, MINOR) the silicon rows were measured on, per engine (autotune/data/serving_silicon.csv's
# engine_version; rows without one are of the same period): a release outside them is predicted with them.
MEASURED_RELEASES = {"vllm": ((0, 11), (0, 18)), "sglang": ((0, 5), (0, 5)), "trtllm": ((1, 0), (1, 3))}


def release_note(release: str) -> str:
    """Where the parameters of an engine release (``trtllm-0.14``, ``vllm-0.12``) come from."""
    name, version = _version(release)
    label = RELEASES[engine_family(release)].split(" ")[0] + (f" {version[0]}.{version[1]}" if version else "")
    if name == "trtllm" and version is not None and version[0] < 1:
        fitted = release if release in LEGACY else _nearest_legacy(version)
        which = "" if fitted == release else f" (the nearest fitted release, for {label})"
        return (f"serving parameters of TensorRT-LLM {fitted.split('-')[1]}{which}, fitted on its performance "
                "tables (autotune/data/serving_runs.csv)")
    outside = ""
    span = MEASURED_RELEASES.get(name)
    if version is not None and span is not None and not span[0] <= version <= span[1]:
        (a, b), (c, d) = span
        outside = (f"; {label} is outside the releases measured there ({label.split(' ')[0]} {a}.{b}"
                   f"{'' if (a, b) == (c, d) else f'-{c}.{d}'}), which stand in for it")
    return (f"serving parameters for {label}: the {label.split(' ')[0]} calibration fitted on operating points its "
            f"2025-26 releases measured (autotune/data/serving_silicon.csv){outside}")


def params_table(engines=ENGINES) -> dict[str, ServingParams]:
    return {e: CURRENT[e] for e in engines}
