"""Serving parameters per engine release and GPU, fitted on serving_runs.csv (``fit_serving``).

Three parameters are fitted per (engine release, GPU) — decode bandwidth fraction, GEMM
efficiency and per-step overhead — because the data shows engine releases differ by 20-50%
on the same plan; ``reserve_gib`` and ``kv_fraction`` are engine settings, not fitted.
Search uses the newest release fitted for the GPU (``params_for_gpu``) and says so.
"""

from __future__ import annotations

from typing import Mapping

from ..costmodel.serving import ServingParams

# Engine-level settings (not fitted): memory the engine keeps for itself, and the share of the
# rest it gives the KV cache (TensorRT-LLM kv_cache_free_gpu_mem_fraction: 0.9 by default;
# the v0.20 tables state 0.95).  vLLM's gpu-memory-utilization default is 0.9.
ENGINE_DEFAULTS: Mapping[str, ServingParams] = {
    "trtllm-0.9": ServingParams(reserve_gib=3.0, kv_fraction=0.90),
    "trtllm-0.14": ServingParams(reserve_gib=3.0, kv_fraction=0.90),
    "trtllm-0.14-triton": ServingParams(reserve_gib=3.0, kv_fraction=0.90),
    "trtllm-0.20": ServingParams(reserve_gib=3.0, kv_fraction=0.95),
}
# The engine's limit on sequences in flight when the benchmark leaves it to the engine.
ENGINE_MAX_BATCH: Mapping[str, int] = {
    "trtllm-0.9": 4096, "trtllm-0.14": 2048, "trtllm-0.14-triton": 2048, "trtllm-0.20": 2048,
}
# Release whose fit stands in for another's (same engine build, different front end).
SHARES_FIT: Mapping[str, str] = {"trtllm-0.14-triton": "trtllm-0.14"}

# (engine, gpu) -> fitted values; written from fit_serving (see docs/cost-model.md, "Serving").
FITTED: Mapping[tuple[str, str], Mapping[str, float]] = {
    ("trtllm-0.14", "a100-sxm4-80gb"): {"decode_bandwidth": 0.5901, "kv_bandwidth": 0.4366, "gemm": 0.467, "step_overhead_us": 1500},
    ("trtllm-0.14", "h100-sxm5-80gb"): {"decode_bandwidth": 0.4718, "kv_bandwidth": 0.5248, "gemm": 0.3562, "step_overhead_us": 1500},
    ("trtllm-0.14", "h200-sxm-141gb"): {"decode_bandwidth": 0.4197, "kv_bandwidth": 0.398, "gemm": 0.3761, "step_overhead_us": 1500},
    ("trtllm-0.14", "l40s-48gb"): {"decode_bandwidth": 0.2278, "kv_bandwidth": 0.9562, "gemm": 0.2142, "step_overhead_us": 1500},
    ("trtllm-0.20", "b200-sxm-180gb"): {"decode_bandwidth": 1, "kv_bandwidth": 0.3202, "gemm": 0.2736, "step_overhead_us": 1500},
    ("trtllm-0.20", "h100-sxm5-80gb"): {"decode_bandwidth": 0.8365, "kv_bandwidth": 0.8752, "gemm": 0.3364, "step_overhead_us": 1500},
    ("trtllm-0.20", "h200-sxm-141gb"): {"decode_bandwidth": 0.8391, "kv_bandwidth": 0.6457, "gemm": 0.4058, "step_overhead_us": 1500},
    ("trtllm-0.9", "h100-sxm5-80gb"): {"decode_bandwidth": 0.3753, "kv_bandwidth": 0.8562, "gemm": 0.4615, "step_overhead_us": 1500},
    ("trtllm-0.9", "h200-sxm-141gb"): {"decode_bandwidth": 0.2995, "kv_bandwidth": 0.7412, "gemm": 0.4982, "step_overhead_us": 1500},
    ("trtllm-0.9", "l40s-48gb"): {"decode_bandwidth": 0.4934, "kv_bandwidth": 0.9931, "gemm": 0.4401, "step_overhead_us": 1.015e-22},
}

NEWEST_FIRST = ("trtllm-0.20", "trtllm-0.14", "trtllm-0.9")


def params_for(engine: str, gpu: str) -> ServingParams:
    base = ENGINE_DEFAULTS.get(engine, ServingParams())
    fitted = FITTED.get((engine, gpu)) or FITTED.get((SHARES_FIT.get(engine, ""), gpu))
    return base.replace(**fitted) if fitted else base


def params_for_gpu(gpu: str) -> tuple[ServingParams, str]:
    """Parameters for planning on ``gpu``: the newest fitted engine release, else the defaults."""
    for engine in NEWEST_FIRST:
        if (engine, gpu) in FITTED:
            return params_for(engine, gpu), f"serving parameters fitted on TensorRT-LLM {engine.split('-')[1]} runs on {gpu}"
    return ServingParams(), f"default serving parameters (no serving runs on {gpu} to fit)"
