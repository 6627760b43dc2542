"""The training cost model's entry point: ``estimate_training(model, cluster, workload, plans)``.

A pure function, vectorised over a :class:`~autotune.plan.PlanBatch`.  It holds no
state; invalid plans must be filtered out before (``autotune.space``); plans
that are valid but do not fit in memory come back with ``fits == False``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

import numpy as np

from ..costmodel.flops import training_flops_per_token
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from .geometry import Geometry, plan_geometry
from .memory import GIB, MEMORY_PARTS, PIPELINE_RUNTIMES, memory_parts
from .plan import PlanBatch
from .step_time import TIME_PARTS, ZERO3_COLLECTIVES, step_time_parts

ATTENTION_KERNELS = ("flash", "unfused", "cudnn")


@dataclass(frozen=True)
class TrainingEstimate:
    """Estimates for a batch of plans; every array has one entry per plan."""

    step_time_s: np.ndarray
    time_breakdown_s: Mapping[str, np.ndarray]
    tokens_per_s_per_gpu: np.ndarray
    tflops_per_gpu: np.ndarray  # model FLOPs (no recomputation)
    mfu: np.ndarray  # model FLOPs / dense bf16 peak
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
            "memory_gib_per_gpu": float(self.memory_gib_per_gpu[i]),
            "memory_headroom_gib": headroom,
            "fits": bool(self.fits[i]),
            "cost_usd_per_million_tokens": float(self.cost_usd_per_million_tokens[i]),
            "time_breakdown_s": {k: float(v[i]) for k, v in self.time_breakdown_s.items()},
            "memory_breakdown_gib": {k: float(v[i]) for k, v in self.memory_breakdown_gib.items()},
        }


def estimate_training(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, *, attention_kernel: str = "flash",
    zero3_collectives: str = "block", pipeline_runtime: str = "megatron",
) -> TrainingEstimate:
    """Estimate every plan of ``plans``.

    ``attention_kernel`` is the software's attention: ``flash`` (FlashAttention-2 / PyTorch SDPA:
    torchtitan, llm-foundry, Hugging Face; the default, what a plan run on plain PyTorch gets),
    ``cudnn`` (cuDNN fused attention through TransformerEngine: NeMo, Megatron-Core; rate
    ``efficiency.cudnn_attention``) or ``unfused`` (Megatron-LM before FlashAttention, 2021-2022:
    scores through HBM).
    ``zero3_collectives`` is the granularity of ZeRO-3 parameter collectives: ``block`` (FSDP,
    one per transformer block) or ``submodule`` (DeepSpeed ZeRO-3 of 2021, one per linear or norm).
    ``pipeline_runtime`` is what the pipeline schedule keeps in memory: ``megatron`` (Megatron-LM,
    NeMo, DeepSpeed) or ``torch`` (torch.distributed.pipelining as in torchtitan 2024: every
    micro-batch's output and receive buffers are kept for the whole step; memory.py).
    """
    if attention_kernel not in ATTENTION_KERNELS:
        raise ValueError(f"attention_kernel must be one of {ATTENTION_KERNELS}, but got ({attention_kernel!r})")
    if zero3_collectives not in ZERO3_COLLECTIVES:
        raise ValueError(f"zero3_collectives must be one of {ZERO3_COLLECTIVES}, but got ({zero3_collectives!r})")
    if pipeline_runtime not in PIPELINE_RUNTIMES:
        raise ValueError(f"pipeline_runtime must be one of {PIPELINE_RUNTIMES}, but got ({pipeline_runtime!r})")
    hw = cluster.hardware
    geo = plan_geometry(model, cluster, workload, plans)
    time_parts = step_time_parts(model, cluster, workload, plans, geo, attention_kernel, zero3_collectives)
    step_time_s = sum(time_parts[k] for k in TIME_PARTS)
    tokens_per_s_per_gpu = workload.tokens_per_step / (step_time_s * cluster.n_gpus)
    model_flops = training_flops_per_token(model, workload.seq_len, "none")
    tflops = tokens_per_s_per_gpu * model_flops / 1e12
    mem_parts = memory_parts(model, geo, workload, plans, hw.efficiency, attention_kernel, pipeline_runtime)
    memory_bytes = sum(mem_parts[k] for k in MEMORY_PARTS)
    memory_gib = memory_bytes / GIB
    price_per_gpu_s = hw.price_usd_per_gpu_hour / 3600.0
    return TrainingEstimate(
        step_time_s=step_time_s,
        time_breakdown_s=time_parts,
        tokens_per_s_per_gpu=tokens_per_s_per_gpu,
        tflops_per_gpu=tflops,
        mfu=tflops * 1e12 / hw.peak_flops("bf16"),
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
