"""The training cost model's entry point: ``estimate_training(model, cluster, workload, plans)``.

A pure function, vectorised over a :class:`~autotune.training.plan.PlanBatch`.  It holds no
state; invalid plans must be filtered out before (``autotune.training.space``); plans
that are valid but do not fit in memory come back with ``fits == False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..costmodel.flops import training_flops_per_token
from ..inputs.framework import Framework, load_framework
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from .geometry import Geometry, plan_geometry
from .memory import GIB, MEMORY_PARTS, memory_parts
from .plan import PRECISION, PlanBatch
from .step_time import TIME_PARTS, step_time_parts


@dataclass(frozen=True)
class TrainingEstimate:
    """Estimates for a batch of plans; every array has one entry per plan."""

    step_time_s: np.ndarray
    time_breakdown_s: Mapping[str, np.ndarray]
    tokens_per_s_per_gpu: np.ndarray
    tflops_per_gpu: np.ndarray  # model FLOPs (no recomputation)
    mfu: np.ndarray  # model FLOPs / dense peak of the plan's GEMM precision (bf16, fp8 or fp4)
    mfu_precision: np.ndarray  # the precision whose peak `mfu` is measured against, per plan
    memory_gib_per_gpu: np.ndarray
    memory_breakdown_gib: Mapping[str, np.ndarray]
    memory_capacity_gib: float
    fits: np.ndarray
    cost_usd_per_million_tokens: np.ndarray
    geometry: Geometry

    def __len__(self) -> int:
        return int(self.step_time_s.shape[0])

    def row(self, i: int) -> dict:
        """One plan's estimate as plain JSON-ready data."""
        headroom = self.memory_capacity_gib - float(self.memory_gib_per_gpu[i])
        return {
            "step_time_s": float(self.step_time_s[i]),
            "tokens_per_s_per_gpu": float(self.tokens_per_s_per_gpu[i]),
            "tflops_per_gpu": float(self.tflops_per_gpu[i]),
            "mfu": float(self.mfu[i]),
            "mfu_peak": str(self.mfu_precision[i]),
            "memory_gib_per_gpu": float(self.memory_gib_per_gpu[i]),
            "memory_headroom_gib": headroom,
            "fits": bool(self.fits[i]),
            "cost_usd_per_million_tokens": float(self.cost_usd_per_million_tokens[i]),
            "time_breakdown_s": {k: float(v[i]) for k, v in self.time_breakdown_s.items()},
            "memory_breakdown_gib": {k: float(v[i]) for k, v in self.memory_breakdown_gib.items()},
        }


def estimate_training(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, framework: Framework | None = None,
) -> TrainingEstimate:
    """Estimate every plan of ``plans`` run by ``framework`` (default: :func:`autotune.inputs.framework.load_framework`'s).

    The framework decides what the software does with a plan: its attention kernel, what
    ``selective`` recompute re-runs and keeps, ZeRO's collectives and buffers, the pipeline
    runtime, how much of each collective it hides on which link, its fp8 casts and its own
    memory (``profiles/frameworks/*.yaml``).  ``autotune validate`` calls this same function
    with each measured run's framework, so a validated figure is one a user can reproduce.
    """
    fw = framework if framework is not None else load_framework()
    hw = cluster.hardware
    geo = plan_geometry(model, cluster, workload, plans)
    time_parts = step_time_parts(model, cluster, workload, plans, geo, fw)
    step_time_s = sum(time_parts[k] for k in TIME_PARTS)
    tokens_per_s_per_gpu = workload.tokens_per_step / (step_time_s * cluster.n_gpus)
    model_flops = training_flops_per_token(model, workload.seq_len, "none")
    tflops = tokens_per_s_per_gpu * model_flops / 1e12
    mem_parts = memory_parts(model, geo, workload, plans, fw)
    memory_bytes = sum(mem_parts[k] for k in MEMORY_PARTS)
    memory_gib = memory_bytes / GIB
    price_per_gpu_s = hw.price_usd_per_gpu_hour / 3600.0
    # MFU against the dense peak of the precision the plan's GEMMs run in: an fp8 plan is measured
    # against the fp8 peak (PaLM appendix B's definition with the achievable peak of that precision).
    precision = np.asarray(plans.precision)
    fp8, fp4 = precision == PRECISION.index("fp8"), precision == PRECISION.index("fp4")
    fp8_peak = hw.peak_flops("fp8") if hw.supports("fp8") else hw.peak_flops("bf16")
    fp4_peak = hw.peak_flops("fp4") if hw.supports("fp4") else hw.peak_flops("bf16")
    peak = np.where(fp4, fp4_peak, np.where(fp8, fp8_peak, hw.peak_flops("bf16")))
    return TrainingEstimate(
        step_time_s=step_time_s,
        time_breakdown_s=time_parts,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        tflops_per_gpu=tflops,
        mfu=tflops * 1e12 / peak,
        mfu_precision=np.where(fp4, "fp4", np.where(fp8, "fp8", "bf16")),
        memory_gib_per_gpu=memory_gib,
        memory_breakdown_gib={k: v / GIB for k, v in mem_parts.items()},
        memory_capacity_gib=hw.memory_gib,
        fits=memory_gib <= hw.memory_gib,
        cost_usd_per_million_tokens=price_per_gpu_s / tokens_per_s_per_gpu * 1e6,
        geometry=geo,
    )


def add_training_totals(estimate: dict[str, Any], n_gpus: int, tokens: float | None, price: float, tokens_per_step: int) -> dict[str, Any]:
    """Total time, GPU-hours and money to train ``tokens`` (when given)."""
    if tokens is None:
        return estimate
    seconds = tokens / (estimate["tokens_per_s_per_gpu"] * n_gpus)
    gpu_hours = seconds / 3600.0 * n_gpus
    return {**estimate, "training_days": seconds / 86400.0, "gpu_hours": gpu_hours, "cost_usd": gpu_hours * price,
            "steps": tokens / tokens_per_step}
