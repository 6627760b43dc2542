"""Hardware profiles (the *system* input of the cost model) and the cluster built from one.

A profile is a YAML file in ``profiles/hardware/``.  Every number carries its
unit in its key and names its source under ``sources``.  The ``efficiency``
block holds the cost model's free parameters (documented in docs/cost-model.md);
``autotune calibrate`` fits them and ``--calibration`` overlays the fit.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Mapping

from ..errors import InputError, check_keys
from . import loading
from .resources import bundled_names, read_named

# Precisions whose dense tensor-core peak a profile may list.  A precision missing
# from a profile is not supported by that GPU (no fp8 on A100, fp4 only on Blackwell).
PRECISIONS = ("tf32", "bf16", "fp16", "fp8", "int8", "fp4")


@dataclass(frozen=True)
class Link:
    """One tier of the network, per GPU: unidirectional bandwidth and per-hop latency."""

    bandwidth_gb_per_s: float
    latency_us: float


@dataclass(frozen=True)
class Efficiency:
    """Free parameters of the cost model, with documented defaults (docs/cost-model.md).

    Defaults are deliberately generic; each bundled profile sets its own values,
    calibrated on published runs.
    """

    gemm: float = 0.80  # large bf16 GEMMs, fraction of dense bf16 peak (MAMF-like ceiling)
    fp8_gemm: float = 0.70  # large fp8 GEMMs, fraction of dense fp8 peak
    gemm_overhead_us: float = 4.0  # fixed time per GEMM (launch, tail wave): the small-shape fall-off
    attention: float = 0.50  # flash attention (FlashAttention-2, PyTorch SDPA), fraction of dense bf16 peak
    # cuDNN fused attention (TransformerEngine in NeMo / Megatron-Core; attention_kernel="cudnn"),
    # fraction of dense bf16 peak; the generic default equals `attention`'s
    cudnn_attention: float = 0.50
    memory: float = 0.80  # memory-bound kernels, fraction of HBM bandwidth
    intra_node_bandwidth: float = 0.80  # NCCL bus bandwidth / link bandwidth inside a node
    inter_node_bandwidth: float = 0.80  # NCCL bus bandwidth / NIC bandwidth across nodes
    tp_overlap: float = 0.0  # fraction of TP communication hidden behind compute
    cp_overlap: float = 0.8  # fraction of ring-attention KV passing hidden behind attention
    ep_overlap: float = 0.0  # fraction of MoE all-to-all hidden
    pp_overlap: float = 0.5  # fraction of pipeline send/recv hidden
    dp_overlap: float = 0.8  # fraction of gradient reduction hidden behind backward
    step_overhead_s: float = 0.05  # fixed per step: optimizer launch, data loading, logging
    workspace_gib: float = 2.0  # CUDA context, cuBLAS/NCCL workspaces
    fragmentation: float = 0.10  # allocator overhead, as a fraction of activation memory



_FRACTIONS = ("gemm", "fp8_gemm", "attention", "cudnn_attention", "memory", "intra_node_bandwidth", "inter_node_bandwidth")
_OVERLAPS = ("tp_overlap", "cp_overlap", "ep_overlap", "pp_overlap", "dp_overlap", "fragmentation")
# (low, high) for every efficiency parameter: what is physically possible.
EFFICIENCY_BOUNDS: Mapping[str, tuple[float, float]] = MappingProxyType(
    {
        **{name: (0.05, 1.0) for name in _FRACTIONS},
        # NVLS/SHARP in-switch reduction reports bus bandwidth above the link rate.
        "intra_node_bandwidth": (0.05, 1.2),
        # The fastest published attention kernels reach about 75% of the dense peak (FlashAttention-3,
        # Shah et al. 2024: 740 TFLOP/s of 989 on H100 in bf16); a fit must not go beyond that.
        "attention": (0.05, 0.75),
        "cudnn_attention": (0.05, 0.75),
        **{name: (0.0, 1.0) for name in _OVERLAPS},
        "gemm_overhead_us": (0.0, 100.0),
        "step_overhead_s": (0.0, 10.0),
        "workspace_gib": (0.0, 16.0),
    }
)
EFFICIENCY_FIELDS = tuple(f.name for f in dataclasses.fields(Efficiency))


@dataclass(frozen=True)
class Hardware:
    """One accelerator type and the node it usually comes in."""

    name: str
    description: str
    peak_tflops: Mapping[str, float]  # dense (no 2:4 sparsity), per precision
    memory_gib: float
    memory_bandwidth_gb_per_s: float
    gpus_per_node: int
    intra_node: Link
    inter_node: Link
    host_link_bandwidth_gb_per_s: float  # GPU <-> CPU (PCIe), one direction
    cpu_optimizer_params_per_s: float  # CPU Adam update rate per GPU's share of the host
    tdp_w: float
    average_power_w: float  # average board power under training load
    price_usd_per_gpu_hour: float
    efficiency: Efficiency = field(default_factory=Efficiency)
    sources: Mapping[str, str] = field(default_factory=dict)

    def supports(self, precision: str) -> bool:
        return precision in self.peak_tflops

    def peak_flops(self, precision: str) -> float:
        """Dense peak in FLOP/s; bf16 stands in for fp16 where a profile lists only one."""
        if precision not in self.peak_tflops:
            raise ValueError(f"{self.name} has no {precision} peak; supported: {', '.join(self.peak_tflops)}")
        return self.peak_tflops[precision] * 1e12

    def with_efficiency(self, **changes: float) -> "Hardware":
        return dataclasses.replace(self, efficiency=dataclasses.replace(self.efficiency, **changes))

    def with_price(self, price_usd_per_gpu_hour: float) -> "Hardware":
        return dataclasses.replace(self, price_usd_per_gpu_hour=price_usd_per_gpu_hour)


@dataclass(frozen=True)
class Cluster:
    """A number of identical GPUs in nodes of ``gpus_per_node``."""

    hardware: Hardware
    n_gpus: int
    gpus_per_node: int

    def __post_init__(self) -> None:
        if self.n_gpus < 1:
            raise ValueError(f"n_gpus must be >= 1, but got (n_gpus={self.n_gpus})")
        if self.gpus_per_node < 1:
            raise ValueError(f"gpus_per_node must be >= 1, but got (gpus_per_node={self.gpus_per_node})")
        if self.n_gpus > self.gpus_per_node and self.n_gpus % self.gpus_per_node:
            raise ValueError(
                "n_gpus must be a multiple of gpus_per_node when it spans several nodes, "
                f"but got (n_gpus={self.n_gpus}, gpus_per_node={self.gpus_per_node})"
            )

    @property
    def n_nodes(self) -> int:
        return max(1, self.n_gpus // self.gpus_per_node)


_TOP_KEYS = frozenset(
    {
        "name", "description", "peak_tflops", "memory_gib", "memory_bandwidth_gb_per_s", "gpus_per_node",
        "intra_node", "inter_node", "host_link_bandwidth_gb_per_s", "cpu_optimizer_params_per_s", "tdp_w",
        "average_power_w", "price_usd_per_gpu_hour", "efficiency", "sources",
    }
)
_LINK_KEYS = frozenset({"bandwidth_gb_per_s", "latency_us"})


def _link(data: dict, key: str, source: str) -> Link:
    raw = data.get(key)
    if not isinstance(raw, dict):
        raise InputError("must be a mapping with bandwidth_gb_per_s and latency_us", source=source, field=key)
    check_keys(raw, _LINK_KEYS, source=source, section=key)
    return Link(
        bandwidth_gb_per_s=loading.number(raw, "bandwidth_gb_per_s", source=source, section=key),
        latency_us=loading.number(raw, "latency_us", source=source, section=key, positive=False, minimum=0),
    )


def efficiency_from_mapping(raw: dict, *, source: str, base: Efficiency | None = None) -> Efficiency:
    """Parse an ``efficiency`` block (a profile's, or a calibration overlay's) onto ``base``."""
    check_keys(raw, frozenset(EFFICIENCY_FIELDS), source=source, section="efficiency")
    values = dataclasses.asdict(base or Efficiency())
    for key in raw:
        low, high = EFFICIENCY_BOUNDS[key]
        values[key] = loading.number(raw, key, source=source, section="efficiency", positive=False,
                                     minimum=low, maximum=high)
    return Efficiency(**values)


def hardware_from_mapping(data: dict, *, source: str) -> Hardware:
    check_keys(data, _TOP_KEYS, source=source)
    peaks_raw = data.get("peak_tflops")
    if not isinstance(peaks_raw, dict) or not peaks_raw:
        raise InputError("must map precisions (e.g. bf16, fp8) to dense TFLOP/s", source=source, field="peak_tflops")
    check_keys(peaks_raw, frozenset(PRECISIONS), source=source, section="peak_tflops")
    peaks = {p: float(loading.number(peaks_raw, p, source=source, section="peak_tflops")) for p in PRECISIONS if p in peaks_raw}
    if "bf16" not in peaks:
        raise InputError("must list bf16 (the reference precision for MFU)", source=source, field="peak_tflops.bf16")
    peaks.setdefault("fp16", peaks["bf16"])
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise InputError("must map field names to their sources", source=source, field="sources")
    eff_raw = data.get("efficiency", {}) or {}
    if not isinstance(eff_raw, dict):
        raise InputError("must be a mapping of parameter names to numbers", source=source, field="efficiency")
    tdp = loading.number(data, "tdp_w", source=source)
    return Hardware(
        name=loading.text(data, "name", source=source),
        description=loading.text(data, "description", source=source, default=""),
        peak_tflops=MappingProxyType(peaks),
        memory_gib=loading.number(data, "memory_gib", source=source),
        memory_bandwidth_gb_per_s=loading.number(data, "memory_bandwidth_gb_per_s", source=source),
        gpus_per_node=loading.integer(data, "gpus_per_node", source=source),
        intra_node=_link(data, "intra_node", source),
        inter_node=_link(data, "inter_node", source),
        host_link_bandwidth_gb_per_s=loading.number(data, "host_link_bandwidth_gb_per_s", source=source),
        cpu_optimizer_params_per_s=loading.number(data, "cpu_optimizer_params_per_s", source=source),
        tdp_w=tdp,
        average_power_w=loading.number(data, "average_power_w", source=source, default=tdp),
        price_usd_per_gpu_hour=loading.number(data, "price_usd_per_gpu_hour", source=source),
        efficiency=efficiency_from_mapping(eff_raw, source=source),
        sources=MappingProxyType({str(k): str(v) for k, v in sources.items()}),
    )


def hardware_to_mapping(hw: Hardware) -> dict:
    """The profile as plain data (what a profile YAML holds, less description and sources, with any calibration
    and --price applied): ``hardware_from_mapping`` reads it back.  Studies store it in their problem record and
    ``plans.json`` embeds it, so a custom profile is read back from anywhere."""
    out = {}
    for f in dataclasses.fields(hw):
        if f.name in ("sources", "description"):
            continue
        value = getattr(hw, f.name)
        if dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def hardware_names() -> list[str]:
    return bundled_names("hardware")


def load_hardware(name_or_path: str) -> Hardware:
    """Load a bundled profile by name, or a profile YAML by path."""
    data, source = read_named("hardware", name_or_path, what="hardware", field="--hardware",
                              alternative="or pass a path to a profile YAML")
    return hardware_from_mapping(data, source=source)
