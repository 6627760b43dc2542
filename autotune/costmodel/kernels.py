"""Time of one GPU's kernels: GEMMs (roofline plus a fixed cost), flash attention, memory-bound ops.

A GEMM of ``m x k`` by ``k x n`` takes the longer of its compute time at
``peak * efficiency.gemm`` (``fp8_gemm`` of the fp8 peak for fp8 plans) and its
memory time (operands and result through HBM at ``bandwidth * efficiency.memory``),
plus ``efficiency.gemm_overhead_us`` (launch, tail wave).  The roofline and the
fixed cost together give the fall-off of efficiency for small and skinny
shapes, which TP, CP and small micro-batches produce (Calculon uses a table of
efficiencies by size for the same effect; ours has one free parameter).

Flash attention runs at ``efficiency.attention`` of the bf16 peak in every
precision (fp8 attention is not assumed); its backward does 2.5x the forward's
FLOPs because it recomputes the probabilities (Dao 2023, FlashAttention-2).
"""

from __future__ import annotations

import numpy as np

from ..hardware import Hardware

FLASH_BACKWARD_FACTOR = 2.5


class Kernels:
    """Kernel time model of one GPU for a batch of plans (``fp8`` is a per-plan bool array)."""

    def __init__(self, hardware: Hardware, fp8: np.ndarray):
        eff = hardware.efficiency
        bf16_rate = hardware.peak_flops("bf16") * eff.gemm
        if hardware.supports("fp8"):
            fp8_rate = hardware.peak_flops("fp8") * eff.fp8_gemm
        else:
            fp8_rate = bf16_rate  # validity rules reject fp8 plans on such GPUs
        self.fp8 = np.asarray(fp8, dtype=bool)
        self.gemm_flops_per_s = np.where(self.fp8, fp8_rate, bf16_rate)
        self.operand_bytes = np.where(self.fp8, 1.0, 2.0)
        self.attention_flops_per_s = hardware.peak_flops("bf16") * eff.attention
        self.memory_bytes_per_s = hardware.memory_bandwidth_gb_per_s * 1e9 * eff.memory
        self.gemm_overhead_s = eff.gemm_overhead_us * 1e-6

    def gemm_s(self, m: np.ndarray, n: np.ndarray, k: np.ndarray, count: float | np.ndarray = 1.0) -> np.ndarray:
        """Forward time of ``count`` GEMMs of shape (m x k) @ (k x n)."""
        compute = 2.0 * m * n * k / self.gemm_flops_per_s
        traffic = (self.operand_bytes * (m * k + k * n) + 2.0 * m * n) / self.memory_bytes_per_s
        return count * (np.maximum(compute, traffic) + self.gemm_overhead_s)

    def attention_forward_s(self, flops: np.ndarray) -> np.ndarray:
        return flops / self.attention_flops_per_s

    def memory_bound_s(self, bytes_moved: np.ndarray) -> np.ndarray:
        return bytes_moved / self.memory_bytes_per_s
