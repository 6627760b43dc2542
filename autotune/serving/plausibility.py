"""Physical bounds on measured serving figures, to tell a units slip from a result.

A measured TTFT or TPOT below a fifth of what the hardware needs at its datasheet peaks, or an output throughput
above five times what the peaks give, is a slip (seconds typed as milliseconds, a deployment's total written per
GPU), not a measurement: the training runs' rule (training.validation.PLAUSIBLE_PEAK_FACTOR), with the same room for
sparsity and counting conventions.  Used by the silicon-schema and serving-runs readers.
"""

from __future__ import annotations

from ..costmodel.flops import forward_flops_per_token
from ..inputs.hardware import Hardware
from ..inputs.modelspec import ModelSpec

PLAUSIBLE_FLOOR_FACTOR = 5.0
MIN_BYTES_PER_PARAM = 0.5  # 4-bit weights: no format autotune plans streams fewer


def _peak_flops(hardware: Hardware) -> float:
    return max(hardware.peak_tflops.values()) * 1e12  # fp4 where the GPU has it: the loosest bound


def ttft_floor_ms(model: ModelSpec, hardware: Hardware, input_len: int, gpus: int) -> float:
    """One prompt's forward FLOPs (costmodel.flops) at the GPU's highest dense peak, spread over ``gpus`` GPUs."""
    flops = input_len * forward_flops_per_token(model, input_len, mtp=False)
    return flops / (gpus * _peak_flops(hardware)) * 1e3


def tpot_floor_ms(model: ModelSpec, hardware: Hardware, gpus: int) -> float:
    """One decode step streaming the active weights once, at 4 bits each, over ``gpus`` GPUs' HBM bandwidth."""
    weight_bytes = model.n_active_params * MIN_BYTES_PER_PARAM
    return weight_bytes / (gpus * hardware.memory_bandwidth_gb_per_s * 1e9) * 1e3


def output_ceiling_tokens_per_s_per_gpu(model: ModelSpec, hardware: Hardware) -> float:
    """PLAUSIBLE_FLOOR_FACTOR times the output tokens/s one GPU's highest dense peak gives at two FLOPs per active
    parameter per token."""
    return PLAUSIBLE_FLOOR_FACTOR * _peak_flops(hardware) / (2.0 * model.n_active_params)


def below_floor(column: str, value_ms: float, floor_ms: float, what: str, mean: str) -> str | None:
    """The error text where ``value_ms`` is below PLAUSIBLE_FLOOR_FACTOR's share of ``floor_ms``; None otherwise."""
    if value_ms >= floor_ms / PLAUSIBLE_FLOOR_FACTOR:
        return None
    return (f"{column} must be at least 1/{PLAUSIBLE_FLOOR_FACTOR:g} of the time {what} takes ({floor_ms:.3g} ms), "
            f"but got ({column}={value_ms:g}); write the mean {mean} in milliseconds")
