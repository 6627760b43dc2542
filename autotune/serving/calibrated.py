"""Serving parameters per engine release and GPU, fitted on serving_runs.csv (``fit_serving``).

Four parameters are fitted per (engine release, GPU) — weight-streaming and KV-streaming
bandwidth fractions, GEMM efficiency, per-step and per-sequence overheads (five numbers; the
two overheads are one physical cost split into its fixed and batch-proportional parts) —
because the data shows engine releases differ by 20-50% on the same plan.  ``reserve_gib``
and ``kv_fraction`` are engine settings, not fitted.

A release or GPU without its own fit falls back to the *pooled* fit: the same parameters
fitted on every release's runs on that GPU (``POOLED``), else on every run of every GPU
(``POOLED_ALL``; the parameters are fractions of each GPU's own peaks, so they transfer).
This is what an engine outside the calibration data (vLLM, SGLang, a newer TensorRT-LLM)
gets, and what the leave-one-source-group-out check measures (docs/serving.md).

Engine properties inferred from the release (``engine_properties``), not fitted per row:

* ``kv_read_per_query_head``: TensorRT-LLM 0.9 and older.  In the v0.9 static-batch tables
  Mistral 7B (8 KV heads) decodes no faster than Llama 2 7B (32 KV heads) at batch 896 and
  128+128 tokens, although its KV cache is 4x smaller: its decode attention evidently streamed
  the cache once per query head (a multi-head kernel run on a grouped-query model), which
  makes GQA save KV *memory* but not KV *traffic*.  Modelling that halves the static-row
  error (docs/serving.md, "Measured error").
"""

from __future__ import annotations

import re
from typing import Mapping

from .estimate import ServingParams

# Engine-level settings (not fitted): memory the engine keeps for itself, and the share of the
# rest it gives the KV cache (TensorRT-LLM kv_cache_free_gpu_mem_fraction: 0.9 by default;
# the v0.20 tables state 0.95).  vLLM's gpu-memory-utilization default is 0.9 of the whole
# GPU, SGLang's mem-fraction-static about 0.88: both close to 0.9 of what the weights leave.
ENGINE_DEFAULTS: Mapping[str, ServingParams] = {
    "trtllm-0.9": ServingParams(reserve_gib=3.0, kv_fraction=0.90),
    "trtllm-0.14": ServingParams(reserve_gib=3.0, kv_fraction=0.90),
    "trtllm-0.14-triton": ServingParams(reserve_gib=3.0, kv_fraction=0.90),
    "trtllm-0.20": ServingParams(reserve_gib=3.0, kv_fraction=0.95),
}
GENERIC_DEFAULTS = ServingParams(reserve_gib=3.0, kv_fraction=0.90)
# The engine's limit on sequences in flight when the benchmark leaves it to the engine
# (trtllm-build --max_batch_size; trtllm-bench tunes it up to 2048 for 0.14 and 0.20).
ENGINE_MAX_BATCH: Mapping[str, int] = {
    "trtllm-0.9": 4096, "trtllm-0.14": 2048, "trtllm-0.20": 2048,
    # The Triton online tables do not state the engine's batch limit; their unlimited-rate rows
    # imply about 256: a mean TTFT of 9.1 s for 500 requests of 256 output tokens at an ITL of
    # 85 ms (70B, TP4) is half the requests waiting one whole batch lifetime (256 x 85 ms x ~0.5).
    "trtllm-0.14-triton": 256,
}
# Release whose fit stands in for another's (same engine build, different front end).
SHARES_FIT: Mapping[str, str] = {"trtllm-0.14-triton": "trtllm-0.14"}

# (engine, gpu) -> fitted values; written from fit_serving (see docs/serving.md).
FITTED: Mapping[tuple[str, str], Mapping[str, float]] = {
    ("trtllm-0.14", "a100-sxm4-80gb"): {"decode_bandwidth": 0.5972, "kv_bandwidth": 0.5657, "gemm": 0.4898, "step_overhead_us": 1500, "seq_overhead_us": 23.6844},
    ("trtllm-0.14", "h100-sxm5-80gb"): {"decode_bandwidth": 0.5164, "kv_bandwidth": 0.6275, "gemm": 0.3857, "step_overhead_us": 249.188, "seq_overhead_us": 11.2234},
    ("trtllm-0.14", "h200-sxm-141gb"): {"decode_bandwidth": 0.5015, "kv_bandwidth": 0.5052, "gemm": 0.4097, "step_overhead_us": 1230.28, "seq_overhead_us": 9.1583},
    ("trtllm-0.14", "l40s-48gb"): {"decode_bandwidth": 0.2905, "kv_bandwidth": 1, "gemm": 0.2305, "step_overhead_us": 0, "seq_overhead_us": 41.2055},
    ("trtllm-0.20", "b200-sxm-180gb"): {"decode_bandwidth": 1, "kv_bandwidth": 0.4441, "gemm": 0.3076, "step_overhead_us": 1500, "seq_overhead_us": 15.7041},
    ("trtllm-0.20", "h100-sxm5-80gb"): {"decode_bandwidth": 0.8518, "kv_bandwidth": 1, "gemm": 0.3843, "step_overhead_us": 1500, "seq_overhead_us": 15.1982},
    ("trtllm-0.20", "h200-sxm-141gb"): {"decode_bandwidth": 0.7176, "kv_bandwidth": 0.9416, "gemm": 0.4519, "step_overhead_us": 1500, "seq_overhead_us": 14.7777},
    ("trtllm-0.9", "h100-sxm5-80gb"): {"decode_bandwidth": 0.4303, "kv_bandwidth": 1, "gemm": 0.5074, "step_overhead_us": 1500, "seq_overhead_us": 15.956},
    ("trtllm-0.9", "h200-sxm-141gb"): {"decode_bandwidth": 0.3376, "kv_bandwidth": 1, "gemm": 0.5439, "step_overhead_us": 1500, "seq_overhead_us": 20.5479},
    ("trtllm-0.9", "l40s-48gb"): {"decode_bandwidth": 0.5491, "kv_bandwidth": 1, "gemm": 0.4756, "step_overhead_us": 0, "seq_overhead_us": 17.5492},
}
# gpu -> values fitted on every release's runs on that GPU (the fallback for other engines).
POOLED: Mapping[str, Mapping[str, float]] = {
    "a100-sxm4-80gb": {"decode_bandwidth": 0.5972, "kv_bandwidth": 0.5657, "gemm": 0.4898, "step_overhead_us": 1500, "seq_overhead_us": 23.6844},
    "b200-sxm-180gb": {"decode_bandwidth": 1, "kv_bandwidth": 0.4441, "gemm": 0.3076, "step_overhead_us": 1500, "seq_overhead_us": 15.7041},
    "h100-sxm5-80gb": {"decode_bandwidth": 0.5716, "kv_bandwidth": 0.7319, "gemm": 0.4212, "step_overhead_us": 1500, "seq_overhead_us": 12.7796},
    "h200-sxm-141gb": {"decode_bandwidth": 0.5151, "kv_bandwidth": 0.6787, "gemm": 0.4467, "step_overhead_us": 1500, "seq_overhead_us": 12.8125},
    "l40s-48gb": {"decode_bandwidth": 0.5393, "kv_bandwidth": 0.7623, "gemm": 0.3822, "step_overhead_us": 0, "seq_overhead_us": 51.4743},
}
# values fitted on every run (the fallback for a GPU without serving runs).
POOLED_ALL: Mapping[str, float] = {"decode_bandwidth": 0.5614, "kv_bandwidth": 0.6432, "gemm": 0.4351, "step_overhead_us": 1500, "seq_overhead_us": 14.5456}

KV_REREAD_FRACTION_TRTLLM_0_9 = 0.25

NEWEST_FIRST = ("trtllm-0.20", "trtllm-0.14", "trtllm-0.9")


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


def engine_max_batch(engine: str) -> int:
    """Sequences in flight the engine allows by default when the benchmark does not say."""
    if engine in ENGINE_MAX_BATCH:
        return ENGINE_MAX_BATCH[engine]
    name, version = _version(engine)
    if name == "vllm":  # --max-num-seqs default: 256 (V0); 1024 for the V1 API server from 0.8
        return 1024 if version is not None and version >= (0, 8) else 256
    return 2048


def _fitted(engine: str, gpu: str) -> Mapping[str, float] | None:
    return FITTED.get((engine, gpu)) or FITTED.get((SHARES_FIT.get(engine, ""), gpu))


def params_for(engine: str, gpu: str, *, pooled_only: bool = False) -> ServingParams:
    """Parameters for ``engine`` on ``gpu``: its own fit, else the pooled fit for the GPU, else over all GPUs."""
    base = ENGINE_DEFAULTS.get(engine) or ENGINE_DEFAULTS.get(SHARES_FIT.get(engine, "")) or GENERIC_DEFAULTS
    base = base.replace(**engine_properties(engine))
    fitted = None if pooled_only else _fitted(engine, gpu)
    fitted = fitted or POOLED.get(gpu) or POOLED_ALL
    return base.replace(**fitted) if fitted else base


def params_for_gpu(gpu: str) -> tuple[ServingParams, str]:
    """Parameters for planning on ``gpu``: the newest fitted engine release, else the pooled fit."""
    for engine in NEWEST_FIRST:
        if (engine, gpu) in FITTED:
            return params_for(engine, gpu), f"serving parameters fitted on TensorRT-LLM {engine.split('-')[1]} runs on {gpu}"
    if gpu in POOLED:
        return params_for("generic", gpu), f"serving parameters pooled over every engine release measured on {gpu}"
    if POOLED_ALL:
        return params_for("generic", gpu), (f"serving parameters pooled over every GPU's serving runs "
                                             f"(fractions of {gpu}'s own peaks; no serving runs on {gpu})")
    return ServingParams(), f"default serving parameters (no serving runs on {gpu} to fit)"
