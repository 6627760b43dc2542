"""Time of one GPU's kernels: GEMMs (roofline plus pipeline fill and a fixed cost), flash attention, memory-bound ops.

GEMMs.  A GEMM of ``m x k`` by ``k x n`` takes the longer of its compute time and its
memory time (operands and result through HBM at ``bandwidth * efficiency.memory``), plus
``efficiency.gemm_overhead_us`` (launch, tail wave).  Its compute rate is
``peak * efficiency.gemm`` (``fp8_gemm`` of the fp8 peak for fp8 linears) times
``k / (k + GEMM_K_FILL)``: every output tile streams the reduction dimension ``k``
through a multistage software pipeline (CUTLASS/cuBLAS Ampere and Hopper kernels:
k-blocks of 32-64 elements, 3-7 stages, then an epilogue), whose fill, drain and
epilogue cost about ``GEMM_K_FILL = 256`` elements of ``k`` whatever ``k`` is.  So
efficiency falls for short reductions -- small hidden sizes, and TP, which splits the
reduction of the attention output and MLP down projections -- as Calculon models with a
size-indexed efficiency table (Isaev et al. 2023) and as MAMF sweeps show
(stas00/ml-engineering compute/accelerator/benchmarks).  ``efficiency.gemm`` is thus the
efficiency of a GEMM with an unbounded reduction; the fitted value sits near the MAMF
ceiling.

Linear layers.  Forward ``Y = X W`` (m tokens, k in, n out); backward ``dX = dY W^T``
(reduction over n) and ``dW = X^T dY`` (reduction over the m tokens).  With fp8
(TransformerEngine, torchao Float8) the three GEMMs run on the fp8 tensor cores; every
GEMM input is cast to fp8 with a transposed copy for the other pass (read 2 bytes, write
1 + 1): the activations and weights forward and the output gradients backward, about
4 bytes per element (TransformerEngine ``cast_transpose``; NVIDIA TE docs "Using FP8
with Transformer Engine").  Attention, norms and the output (logits) layer stay bf16.
With NVFP4 (TransformerEngine's NVFP4BlockScaling recipe; NVIDIA, "Pretraining Large Language
Models with NVFP4", arXiv 2509.25149 §4) the three GEMMs run on the FP4 tensor cores: E2M1 values
with one E4M3 scale per 16 (0.5625 bytes a value), row-wise and column-wise copies, so a cast
reads 2 bytes and writes 2 x 0.5625 (``FP4_CAST_BYTES``; the random Hadamard transform of the
weight-gradient operands is fused into that cast).  No FP4 GEMM ceiling has been measured for the
bundled GPUs, so FP4 GEMMs reach the same share of their peak as FP8 GEMMs do of theirs
(``efficiency.fp8_gemm``): an assumption the published NVFP4 runs check (docs/accuracy.md).

Flash attention.  A score costs ``4 d`` tensor-core FLOPs forward (QK^T and PV with head
dimension d) plus the online softmax (exponent, max, row sums, rescaling), which runs on
the special-function and FP32 units: on A100 the exponent alone has 1/16 of the
tensor-core throughput per SM, on H100 1/256 (Shah et al. 2024, FlashAttention-3, §1).
FlashAttention-2 overlaps little of it (Dao 2023, §3), so we charge
``ATTENTION_SOFTMAX_FLOPS = 64`` tensor-core-FLOP equivalents per score and pass, which
gives the measured FA2 ratio of head dim 64 to 128 throughput (about 0.85-0.9 forward,
Dao 2023 Fig. 4).  The backward does 2.5x the forward's matmul FLOPs (it recomputes the
probabilities; 5 GEMMs instead of 2) and one more softmax pass.  Like the GEMMs' reduction fill,
each query block pays a fixed cost whatever the key length, so the rate is times
``kv / (kv + ATTENTION_KV_FILL)`` for keys ``kv`` long per kernel call (the CP shard in ring attention).  All of it runs at
``efficiency.attention`` of the bf16 peak (``efficiency.cudnn_attention`` for cuDNN's fused
attention, ``attention_kernel="cudnn"``: TransformerEngine in NeMo and Megatron-Core, whose
Hopper kernels run faster than FlashAttention-2) in every precision (fp8 attention is not
assumed: TE and torchao keep it bf16 in these recipes).
"""

from __future__ import annotations

import numpy as np

from ..inputs.hardware import Hardware

FLASH_BACKWARD_FACTOR = 2.5  # backward matmul FLOPs / forward (FlashAttention-2)
# Key/value elements' worth of per-query-block work that does not scale with the sequence (loading the
# query tile, the softmax bookkeeping at each row's start and end, writing the output and its
# statistics): a flash kernel's throughput rises with the key length as s / (s + ATTENTION_KV_FILL).
# FlashAttention-2's own benchmarks (Dao 2023, Fig. 4-6: causal, head dim 128, forward + backward on
# A100) rise from about half their long-sequence throughput at 512 tokens to ~0.8 at 2K and ~0.94 at 8K,
# which s / (s + 512) reproduces; the cuDNN and FlashAttention-3 Hopper kernels show the same shape.
ATTENTION_KV_FILL = 512.0
GEMM_K_FILL = 256.0  # reduction elements' worth of pipeline fill, drain and epilogue per output tile
ATTENTION_SOFTMAX_FLOPS = 64.0  # tensor-core FLOP equivalents per score per pass for the online softmax
FP8_CAST_BYTES = 4.0  # per element cast to fp8: read bf16 (2), write fp8 and its transpose (1 + 1); frameworks may differ
NVFP4_BYTES = 0.5 + 1.0 / 16.0  # an E2M1 value and its share of the block's E4M3 scale (16 values a block)
FP4_CAST_BYTES = 2.0 + 2.0 * NVFP4_BYTES  # read bf16, write the row-wise and column-wise NVFP4 copies
# Grouped GEMMs (the routed experts of an MoE layer: Megatron-Core TEGroupedMLP / cuBLAS and CUTLASS grouped
# kernels, DeepGEMM's contiguous-layout grouped GEMM): one kernel for all local experts, so the fixed
# per-GEMM cost is paid once, but every expert's rows are padded up to the kernel's tile of M rows
# (DeepGEMM aligns each expert's tokens to its 128-row block, get_m_alignment_for_contiguous_layout;
# CUTLASS Hopper grouped GEMMs tile M by 64-256).  Few tokens per expert therefore cost a whole tile,
# and the expert weights are read once per expert whatever the tokens: small expert GEMMs fall to the
# memory roofline.
GROUPED_GEMM_M_TILE = 128.0


def gemm_operand_bytes(fp8: np.ndarray | bool, fp4: np.ndarray | bool) -> np.ndarray:
    """Bytes of a linear layer's GEMM operand, or of a GEMM input kept for the weight gradient: 2 in bf16, 1 in fp8,
    NVFP4_BYTES in NVFP4."""
    return np.where(np.asarray(fp4, dtype=bool), NVFP4_BYTES, np.where(np.asarray(fp8, dtype=bool), 1.0, 2.0))


class Kernels:
    """Kernel time model of one GPU for a batch of plans (``fp8`` and ``fp4`` are per-plan bool arrays: the
    plans whose linear layers run in fp8, and in NVFP4)."""

    def __init__(self, hardware: Hardware, fp8: np.ndarray, attention_kernel: str = "flash",
                 fp8_cast_bytes: float = FP8_CAST_BYTES, fp4: np.ndarray | bool = False):
        eff = hardware.efficiency
        self.bf16_rate = hardware.peak_flops("bf16") * eff.gemm
        # validity rules reject fp8 and fp4 plans on GPUs without those tensor cores
        fp8_rate = hardware.peak_flops("fp8") * eff.fp8_gemm if hardware.supports("fp8") else self.bf16_rate
        fp4_rate = hardware.peak_flops("fp4") * eff.fp8_gemm if hardware.supports("fp4") else self.bf16_rate
        self.fp8 = np.asarray(fp8, dtype=bool)
        self.fp4 = np.broadcast_to(np.asarray(fp4, dtype=bool), self.fp8.shape)
        self.linear_flops_per_s = np.where(self.fp4, fp4_rate, np.where(self.fp8, fp8_rate, self.bf16_rate))
        self.linear_k_fill = GEMM_K_FILL
        self.linear_operand_bytes = gemm_operand_bytes(self.fp8, self.fp4)
        # HBM bytes per element cast into the plan's GEMM precision (none in bf16)
        self.linear_cast_bytes = np.where(self.fp4, FP4_CAST_BYTES, np.where(self.fp8, fp8_cast_bytes, 0.0))
        # FlashAttention-2 and cuDNN's fused attention (TransformerEngine) share the FLOP model
        # (tiled, scores never written) but not the rate: each has its own efficiency.
        attention_eff = eff.cudnn_attention if attention_kernel == "cudnn" else eff.attention
        self.attention_flops_per_s = hardware.peak_flops("bf16") * attention_eff
        self.memory_bytes_per_s = hardware.memory_bandwidth_gb_per_s * 1e9 * eff.memory
        self.gemm_overhead_s = eff.gemm_overhead_us * 1e-6

    # --- GEMMs -------------------------------------------------------------------------------
    def _gemm(self, m, n, k, count, rate, operand_bytes, k_fill=GEMM_K_FILL) -> np.ndarray:
        compute = 2.0 * m * n * k / rate * (1.0 + k_fill / k)
        traffic = (operand_bytes * (m * k + k * n) + 2.0 * m * n) / self.memory_bytes_per_s
        return count * (np.maximum(compute, traffic) + self.gemm_overhead_s)

    def gemm_s(self, m, n, k, count: float | np.ndarray = 1.0) -> np.ndarray:
        """A bf16 GEMM (m x k) @ (k x n), ``count`` times."""
        return self._gemm(m, n, k, count, self.bf16_rate, 2.0)

    def linear_s(self, m, n, k, count: float | np.ndarray = 1.0) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward time of ``count`` linear layers: m tokens, k inputs, n outputs.

        In the plan's GEMM precision (fp8 plans: fp8, plus the casts of every GEMM input).
        """
        forward, dgrad, wgrad = self.linear_parts(m, n, k, count)
        return forward, dgrad + wgrad

    def linear_parts(self, m, n, k, count: float | np.ndarray = 1.0
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forward, input-gradient and weight-gradient time of ``count`` linear layers (see ``linear_s``).
        The output gradient's cast is charged to the input gradient."""
        rate, ob, kf = self.linear_flops_per_s, self.linear_operand_bytes, self.linear_k_fill
        forward = self._gemm(m, n, k, count, rate, ob, kf)
        dgrad = self._gemm(m, k, n, count, rate, ob, kf)
        wgrad = self._gemm(k, n, m, count, rate, ob, kf)
        cast = self.linear_cast_bytes
        forward = forward + self.memory_bound_s(cast * count * (m * k + k * n))
        dgrad = dgrad + self.memory_bound_s(cast * count * m * n)
        return forward, dgrad, wgrad

    def grouped_linear_parts(self, m, n, k, groups) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Forward, input-gradient and weight-gradient time of one grouped GEMM over ``groups`` experts
        of ``m`` tokens each (k inputs, n outputs): every expert's rows padded to ``GROUPED_GEMM_M_TILE``,
        the weights read once per expert, the fixed per-GEMM cost once per grouped kernel."""
        m = np.asarray(m, dtype=np.float64)
        groups = np.asarray(groups, dtype=np.float64)
        padded = np.ceil(np.maximum(m, 1e-9) / GROUPED_GEMM_M_TILE) * GROUPED_GEMM_M_TILE
        rate, ob, kf = self.linear_flops_per_s, self.linear_operand_bytes, self.linear_k_fill
        mem = self.memory_bytes_per_s

        def one(rows, cols, red, work_rows):
            compute = 2.0 * work_rows * cols * red / rate * (1.0 + kf / red)
            traffic = (ob * (rows * red + red * cols) + 2.0 * rows * cols) / mem
            return groups * np.maximum(compute, traffic)

        forward = one(m, n, k, padded) + self.gemm_overhead_s
        dgrad = one(m, k, n, padded) + self.gemm_overhead_s
        # Weight gradient: each expert reduces over its own tokens (the padded tile rows).
        compute = 2.0 * k * n * padded / rate * (1.0 + kf / padded)
        traffic = (ob * (k * m + m * n) + 2.0 * k * n) / mem
        wgrad = groups * np.maximum(compute, traffic) + self.gemm_overhead_s
        cast = self.linear_cast_bytes
        forward = forward + self.memory_bound_s(cast * groups * (m * k + k * n))
        dgrad = dgrad + self.memory_bound_s(cast * groups * m * n)
        return forward, dgrad, wgrad

    # --- attention ---------------------------------------------------------------------------
    def flash_attention_s(self, scores: np.ndarray, head_dim: int, kv_len: np.ndarray | float = np.inf,
                          value_dim: float | None = None) -> tuple[np.ndarray, np.ndarray]:
        """Forward and backward time of flash attention over ``scores`` (query-key pairs computed) with
        keys ``kv_len`` long per call (the sequence, or its CP shard in ring attention).  ``value_dim``:
        the values' head width where it differs from the keys' (MLA: 192-wide QK^T, 128-wide PV)."""
        fill = 1.0 + ATTENTION_KV_FILL / np.asarray(kv_len, dtype=np.float64)
        rate = self.attention_flops_per_s / fill
        matmul = 2.0 * head_dim + 2.0 * (head_dim if value_dim is None else value_dim)
        forward = scores * (matmul + ATTENTION_SOFTMAX_FLOPS) / rate
        backward = scores * (FLASH_BACKWARD_FACTOR * matmul + 2.0 * ATTENTION_SOFTMAX_FLOPS) / rate
        return forward, backward

    def attention_forward_s(self, flops: np.ndarray) -> np.ndarray:
        return flops / self.attention_flops_per_s

    def memory_bound_s(self, bytes_moved: np.ndarray) -> np.ndarray:
        return bytes_moved / self.memory_bytes_per_s
