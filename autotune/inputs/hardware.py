"""Hardware profiles (the *system* input of the cost model) and the cluster built from one.

A profile is a YAML file in ``profiles/hardware/``.  Every number carries its
unit in its key and names its source under ``sources``.  The ``efficiency``
block holds the cost model's free parameters (documented in docs/cost-model.md);
``autotune calibrate`` fits them and ``--calibration`` overlays the fit.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Mapping

from ..errors import InputError, check_keys
from . import loading
from .resources import bundled_dir, bundled_names, read_named, require_name

# Precisions whose dense tensor-core peak a profile may list.  A precision missing
# from a profile is not supported by that GPU (no fp8 on A100, fp4 only on Blackwell).
# The block-scaled formats are listed apart from the plain ones they run on, because a GPU
# may run a format's arithmetic without its hardware scaling: MXFP8 (OCP microscaling, 32-element
# blocks with E8M0 scales) needs Blackwell; Hopper's fp8 with DeepSeek-style 128-element block
# scales is plain "fp8" scaled in software.  NVFP4 (16-element blocks, FP8 scales) and MXFP4 run on
# the FP4 (E2M1) tensor cores.
PRECISIONS = ("tf32", "bf16", "fp16", "fp8", "mxfp8", "int8", "fp4", "nvfp4", "mxfp4")
# A block-scaled format needs the plain format it runs on.
BLOCK_SCALED_BASE = MappingProxyType({"mxfp8": "fp8", "nvfp4": "fp4", "mxfp4": "fp4"})
# Which link a process group's traffic crosses, fastest first (see Cluster.link_tier).
LINK_TIERS = ("none", "intra_node", "scale_up", "inter_node")


# The most a price may state, USD per GPU-hour (--price and a profile's price_usd_per_gpu_hour): the dearest GPUs rent
# for about $10 an hour (hardware.md's sources), so more is a price per node, per month or in cents, which would rank
# plans by a wrong cost.
MAX_PRICE_USD_PER_GPU_HOUR = 1000.0
# The least a positive price may state: the cheapest GPUs rent for about $0.10 an hour, so less is a price per
# GPU-second or per GPU-minute ($2.99 an hour is 0.00083 a second), which would rank plans by a cost 3,600 times too
# low; 1e-308 printed costs of $0.000.  A price of 0 (GPUs already paid for) stays allowed where --price takes it.
MIN_PRICE_USD_PER_GPU_HOUR = 0.01
# The most GPUs one scale-up fabric (and so one node, which lies inside one) may join: the largest announced holds
# 15,488 accelerators (Huawei's Atlas 960 SuperPoD; NVIDIA's largest NVLink domain is 576 GPUs), so a bound of about
# four times that refuses only a domain no fabric builds (100,000 GPUs all at NVLink speed), which would plan every
# collective of a whole cluster at the node link's rate.
MAX_SCALE_UP_GPUS = 65_536

@dataclass(frozen=True)
class Link:
    """One tier of the network, per GPU: unidirectional bandwidth and per-hop latency."""

    bandwidth_gb_per_s: float
    latency_us: float


@dataclass(frozen=True)
class Efficiency:
    """Free parameters of the cost model that belong to the hardware, with documented defaults.

    What the *software* hides or allocates (communication overlap, logits and workspace memory,
    allocator overhead) belongs to the framework profile (``autotune/inputs/framework.py``), not here.
    Defaults are deliberately generic; each bundled profile sets its own values: calibrated on
    published runs, or derived the documented way for a GPU without runs (docs/cost-model.md).
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
    step_overhead_s: float = 0.05  # fixed per step: optimizer launch, data loading, logging


_FRACTIONS = ("gemm", "fp8_gemm", "attention", "cudnn_attention", "memory", "intra_node_bandwidth", "inter_node_bandwidth")
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
        "gemm_overhead_us": (0.0, 100.0),
        "step_overhead_s": (0.0, 10.0),
    }
)
EFFICIENCY_FIELDS = tuple(f.name for f in dataclasses.fields(Efficiency))
# Physical ceilings of a profile's numbers, per GPU: about a hundred times (or more) the largest of any
# accelerator so far (B300: 288 GiB at 8 TB/s, 15 PFLOP/s dense fp4, 1,400 W; NVLink5 900 GB/s one way).
# Beyond them a number is a unit slip (TB for GB, MiB for GiB) or an attack, which the cost model would
# otherwise plan on silently.
# (limit, unit, what it bounds); the key is the field as errors name it, "<link>." standing for any link section.
PHYSICAL_LIMITS: Mapping[str, tuple[float, str, str]] = MappingProxyType(
    {
        "peak_tflops": (1_000_000, "TFLOP/s", "a dense peak per GPU"),
        "memory_gib": (100_000, "GiB", "memory per GPU"),
        "memory_bandwidth_gb_per_s": (1_000_000, "GB/s", "memory bandwidth per GPU"),
        "gpus_per_node": (MAX_SCALE_UP_GPUS, "GPUs", "GPUs in one node, which lies within one scale-up fabric"),
        "scale_up_domain_gpus": (MAX_SCALE_UP_GPUS, "GPUs", "GPUs on one scale-up fabric"),
        "<link>.bandwidth_gb_per_s": (100_000, "GB/s", "link bandwidth per GPU, one direction"),
        "<link>.latency_us": (1_000_000, "us", "per-hop link latency (one second)"),
        "host_link_bandwidth_gb_per_s": (100_000, "GB/s", "host link bandwidth per GPU, one direction"),
        "cpu_optimizer_params_per_s": (1e13, "parameters/s", "CPU optimizer rate per GPU"),
        "tdp_w": (100_000, "W", "board power per GPU"),
    }
)

# Floors of the numbers vendors quote in a larger unit (HBM bandwidth in TB/s, Blackwell peaks in PFLOP/s): copied
# as they are printed, 3.35 for 3,350 GB/s or 2.25 for 2,250 TFLOP/s plan a GPU a thousand times too slow.  The
# floors sit below the smallest accelerators someone may profile (a Jetson Orin Nano's 34 GB/s, an A2's 18 TFLOP/s
# bf16) and above every datasheet number in the larger unit (B300: 8 TB/s; GB300: 2.5 PFLOP/s bf16).  Only the
# bf16 peak has a floor (tf32 is 9 TFLOP/s on an A2); another precision is checked against it instead
# (PEAK_RATIO_FLOOR).
# The links and the host's optimizer rate have floors too, far below any real one (a 1 Gb/s Ethernet port moves
# 0.125 GB/s; one CPU core steps an Adam optimizer over ~1e8 parameters/s): a positive number near zero (1e-300)
# planned a step of 10^300 s, printed with 300 digits.
PHYSICAL_FLOORS: Mapping[str, tuple[float, str, str]] = MappingProxyType(
    {  # (floor, unit, what a slip gives instead); "<link>." stands for any link section, as in PHYSICAL_LIMITS
        "peak_tflops.bf16": (3.0, "TFLOP/s", "the PFLOP/s a datasheet may print"),
        "memory_bandwidth_gb_per_s": (20.0, "GB/s", "the TB/s a datasheet may print"),
        "<link>.bandwidth_gb_per_s": (0.1, "GB/s", "the TB/s a datasheet may print"),
        "host_link_bandwidth_gb_per_s": (0.1, "GB/s", "the TB/s a datasheet may print"),
        "cpu_optimizer_params_per_s": (1e6, "parameters/s", "a count in billions (1.2 for 1.2e9)"),
        # the least board power of any accelerator board (a Jetson Orin Nano draws 7 W); below it is the kW a
        # datasheet may print (0.7 for a 700 W H100), and average_power_w 1e-308 reported 0 MWh and 0 t CO2e
        "tdp_w": (1.0, "W", "the kW a datasheet may print"),
        "average_power_w": (1.0, "W", "the kW a datasheet may print"),
    }
)
# A peak of another precision below this share of the bf16 peak is a unit slip (4.5 for a B200's 4,500 TFLOP/s
# fp8 beside 2,250 bf16): the slowest real ratio is tf32 at half of bf16, or a B300's int8 at 0.07 of it.
PEAK_RATIO_FLOOR = 0.01


def _physical(data: dict, key: str, *, source: str, section: str = "", limit_key: str | None = None,
              integer: bool = False, **kwargs) -> float:
    """``loading.number`` (or ``loading.integer``) of ``key``, also refused above its physical ceiling."""
    read = loading.integer if integer else loading.number
    value = read(data, key, source=source, section=section, **kwargs)
    limit, unit, what = PHYSICAL_LIMITS[limit_key or key]
    if value is not None and value > limit:
        field = f"{section}.{key}" if section else key
        shown = f"{int(limit):,}" if limit < 1e9 else f"{limit:g}"
        raise InputError(f"must be <= {shown} {unit} (a physical ceiling on {what}; check the value and its unit), "
                         f"but got {value!r}", source=source, field=field)
    field = f"{section}.{key}" if section else key
    floor, unit, slip = PHYSICAL_FLOORS.get(field) or PHYSICAL_FLOORS.get(limit_key or key, (None, "", ""))
    if value is not None and floor is not None and value < floor:
        raise InputError(f"must be >= {floor:g} {unit} (below any accelerator's; give {unit}, not {slip}), "
                         f"but got {value!r}", source=source, field=field)
    return value


def _price(data: dict, source: str) -> float:
    """``price_usd_per_gpu_hour``: from MIN_PRICE_USD_PER_GPU_HOUR to MAX_PRICE_USD_PER_GPU_HOUR."""
    price = loading.number(data, "price_usd_per_gpu_hour", source=source, maximum=MAX_PRICE_USD_PER_GPU_HOUR)
    if price < MIN_PRICE_USD_PER_GPU_HOUR:
        raise InputError(f"price_usd_per_gpu_hour >= {MIN_PRICE_USD_PER_GPU_HOUR:g} USD must hold (below any GPU's "
                         f"rent: give the price of one GPU for one hour, not a second or a minute), but got "
                         f"(price_usd_per_gpu_hour={price:g})", source=source, field="price_usd_per_gpu_hour")
    return price


# A measured memory per GPU may exceed the profile's capacity by this share at most (plausible_memory_gib).
MEASURED_MEMORY_MARGIN = 0.10


@dataclass(frozen=True)
class Hardware:
    """One accelerator type, the node it usually comes in, and the scale-up domain nodes form.

    A node (``gpus_per_node``) is the unit of host, NICs and PCIe: 8 GPUs in an HGX board, 4 in a
    GB200/GB300 compute tray.  A scale-up domain (``scale_up_domain_gpus``) is the set of GPUs one
    NVLink fabric joins: the node itself on HGX, 72 GPUs across 18 trays in an NVL72 rack.  Traffic
    between nodes of one domain runs on ``scale_up`` (NVLink through the rack's switch trays), not on
    the NICs of ``inter_node``.
    """

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
    # Whether the compute efficiencies were fitted to validated runs of this GPU or its silicon family;
    # a profile without such runs derives them from its measured GEMM ceilings (`reference_efficiency`)
    # the documented way (calibration.derived_efficiency) and says "uncalibrated" in the output.
    calibrated: bool = False
    # Measured microbenchmark ceilings, fractions of the dense peak: `gemm` / `fp8_gemm` = best-shape
    # matmul throughput (MAMF, data/hardware.md 2a).
    reference_efficiency: Mapping[str, float] = field(default_factory=dict)
    scale_up_domain_gpus: int | None = None  # GPUs joined by one NVLink fabric; None: the node
    scale_up: Link | None = None  # per GPU, between nodes of one scale-up domain; None: as intra_node
    price_estimated: bool = False  # no public price: price_usd_per_gpu_hour is an estimate (see sources)
    # Host CPU time per framework op relative to an x86 server host (an H100 DGX's Xeon 8480C), which the
    # frameworks' host_op_us is given for: Grace hosts issue PyTorch ops ~2.75x slower (TE issue #2053).
    host_op_scale: float = 1.0
    # Who makes the GPU: software that runs on one vendor's GPUs only (TensorRT-LLM, the Marlin dequantising
    # kernels) is refused or not planned on the other's.
    vendor: str = "nvidia"
    # CUDA compute capability (9.0 Hopper, 10.0 / 10.3 datacenter Blackwell, 12.0 RTX Blackwell); None where
    # unknown or not an NVIDIA GPU. Software support follows it, not the tensor-core list: TransformerEngine
    # runs MXFP8 recipes on 10.x only, though sm_120 has block-scaled fp8 MMAs (TE issue #2668).
    compute_capability: float | None = None

    def __post_init__(self) -> None:
        domain = self.scale_up_domain_gpus
        if domain is not None and (domain < self.gpus_per_node or domain % self.gpus_per_node):
            raise ValueError("scale_up_domain_gpus must be a multiple of gpus_per_node, but got "
                             f"(scale_up_domain_gpus={domain}, gpus_per_node={self.gpus_per_node})")

    @property
    def plausible_memory_gib(self) -> float:
        """The most memory a measurement on one of these GPUs can report: its capacity and a margin
        (MEASURED_MEMORY_MARGIN) for decimal GB counted as GiB (7%) and rounding; more is a unit slip (MiB, all
        GPUs summed) or a host figure, not a GPU's peak."""
        return self.memory_gib * (1.0 + MEASURED_MEMORY_MARGIN)

    @property
    def gpus_per_scale_up_domain(self) -> int:
        return self.scale_up_domain_gpus or self.gpus_per_node

    @property
    def scale_up_link(self) -> Link:
        """The link between nodes of one scale-up domain (the node link where the domain is the node)."""
        return self.scale_up or self.intra_node

    def supports(self, precision: str) -> bool:
        """Whether the GPU has tensor cores for ``precision``; a block-scaled format (mxfp8, nvfp4,
        mxfp4) is supported only where the profile lists it, never inferred from fp8 or fp4."""
        return precision in self.peak_tflops

    def peak_flops(self, precision: str) -> float:
        """Dense peak in FLOP/s; bf16 stands in for fp16 where a profile lists only one."""
        if precision not in self.peak_tflops:
            raise ValueError(f"{self.name} has no {precision} peak; supported: {', '.join(self.peak_tflops)}")
        return self.peak_tflops[precision] * 1e12

    def with_efficiency(self, **changes: float) -> "Hardware":
        return dataclasses.replace(self, efficiency=dataclasses.replace(self.efficiency, **changes))

    def with_price(self, price_usd_per_gpu_hour: float) -> "Hardware":
        # + 0.0 turns --price -0 into 0: it had printed "$-0 per GPU-hour" and "$-0.00 per hour"
        return dataclasses.replace(self, price_usd_per_gpu_hour=price_usd_per_gpu_hour + 0.0)


@dataclass(frozen=True)
class Cluster:
    """A number of identical GPUs in nodes of ``gpus_per_node``, nodes in scale-up domains.

    ``scale_up_domain_gpus`` overrides the profile's domain (for example 64 of an NVL72 rack's 72
    GPUs, as jobs that keep spare trays use); left out, the domain is the profile's, or the node
    where the profile's domain is no larger than the node.
    """

    hardware: Hardware
    n_gpus: int
    gpus_per_node: int
    scale_up_domain_gpus: int | None = None

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
        domain = self.gpus_per_scale_up_domain
        if domain % self.gpus_per_node:
            raise ValueError("the scale-up domain must be a whole number of nodes, but got "
                             f"(scale_up_domain_gpus={domain}, gpus_per_node={self.gpus_per_node})")

    @property
    def n_nodes(self) -> int:
        return max(1, self.n_gpus // self.gpus_per_node)

    @property
    def gpus_per_scale_up_domain(self) -> int:
        """GPUs one NVLink fabric joins: the override, else the profile's domain, else the node."""
        if self.scale_up_domain_gpus:
            return self.scale_up_domain_gpus
        domain = self.hardware.scale_up_domain_gpus
        return domain if domain and domain > self.gpus_per_node else self.gpus_per_node

    @property
    def n_scale_up_domains(self) -> int:
        return -(-self.n_gpus // self.gpus_per_scale_up_domain)

    def link_tier(self, group_size: int, stride: int = 1) -> str:
        """The slowest link (``LINK_TIERS``) a process group of ``group_size`` ranks, ``stride`` ranks
        apart, crosses, with ranks numbered node by node and domain by domain (Megatron's order: TP
        innermost, so a TP group has stride 1, an EP group over TP ranks stride tp).

        The groups tile the ranks in blocks of ``group_size * stride``.  Inside a node: where that
        block divides the node, or the whole cluster is one node.  Inside a scale-up domain: where
        the whole cluster fits in one, or the blocks fit whole in the domains the job occupies.  A
        block that does not divide the domain (64 ranks in a 72-GPU NVL72 rack) is placed inside it
        with the rest of the domain left out of such groups, as jobs on NVL72 run 64 GPUs per rack,
        where the job's racks have the GPUs to spare: 256 GPUs in blocks of 64 on four racks (288),
        but not 288 GPUs in blocks of 32 (four racks hold 8 such blocks, 256 GPUs; the other blocks
        straddle two racks, and their collectives run at the network's speed).  Give the cluster
        ``scale_up_domain_gpus`` to state the domain a job really uses.  ``none``: a group of one rank.
        """
        if group_size < 1 or stride < 1:
            raise ValueError(f"group_size and stride must be >= 1, but got (group_size={group_size}, stride={stride})")
        if group_size == 1:
            return "none"
        block = group_size * stride
        if self.n_gpus <= self.gpus_per_node or self.gpus_per_node % block == 0:
            return "intra_node"
        if self.gpus_per_scale_up_domain > self.gpus_per_node and self.domains_hold_blocks(block):
            return "scale_up"
        return "inter_node"

    @property
    def usable_scale_up_domain(self) -> int:
        """GPUs of one NVLink domain that process groups use: the whole domain where the job fills its domains (or
        fits in one), else the largest power-of-two number of its nodes -- 64 of an NVL72 rack's 72 GPUs, as jobs of
        power-of-two groups run on NVL72; the node on HGX boards.  The cost model's group topology and
        ``link_tier`` (which the launch files follow) both read it."""
        gpn, domain = self.gpus_per_node, self.gpus_per_scale_up_domain
        if domain <= gpn or self.n_gpus <= domain or self.n_gpus % domain == 0:
            return domain
        nodes = 1
        while 2 * nodes * gpn <= domain:
            nodes *= 2
        return nodes * gpn

    def domains_hold_blocks(self, block: int) -> bool:
        """Blocks of ``block`` consecutive ranks sit whole inside the NVLink domains the job uses: the job fits in
        one domain, or the domains it occupies (``usable_scale_up_domain`` GPUs of each) hold whole blocks for every
        GPU -- 288 GB200 GPUs in blocks of 32 do not (four full racks hold 8 blocks, 256 GPUs)."""
        if self.n_gpus <= self.gpus_per_scale_up_domain:
            return True
        usable = self.usable_scale_up_domain
        if block > usable:
            return False
        domains = -(-self.n_gpus // usable)  # the fewest domains the job occupies
        return domains * (usable // block) * block >= self.n_gpus

    def link(self, tier: str) -> Link | None:
        """The per-GPU link of a tier (None for ``none``)."""
        hw = self.hardware
        links = {"none": None, "intra_node": hw.intra_node, "scale_up": hw.scale_up_link, "inter_node": hw.inter_node}
        if tier not in links:
            raise ValueError(f"tier must be one of {LINK_TIERS}, but got (tier={tier!r})")
        return links[tier]

    def group_link(self, group_size: int, stride: int = 1) -> Link | None:
        """The link a process group's slowest hop runs on (``link(link_tier(...))``)."""
        return self.link(self.link_tier(group_size, stride))

    def members_per_scale_up_domain(self, group_size: int, stride: int = 1) -> int:
        """Members of a group in each scale-up domain it touches (as ``comm.Topology.per_node`` per node)."""
        return max(1, min(group_size, self.gpus_per_scale_up_domain // stride))


_TOP_KEYS = frozenset(
    {
        "name", "description", "peak_tflops", "memory_gib", "memory_bandwidth_gb_per_s", "gpus_per_node",
        "intra_node", "inter_node", "host_link_bandwidth_gb_per_s", "cpu_optimizer_params_per_s", "tdp_w",
        "average_power_w", "price_usd_per_gpu_hour", "efficiency", "sources", "calibrated", "reference_efficiency",
        "scale_up_domain_gpus", "scale_up", "price_estimated", "host_op_scale", "vendor",
        "compute_capability",
    }
)
REFERENCE_KEYS = frozenset({"gemm", "fp8_gemm"})
VENDORS = ("nvidia", "amd")
_LINK_KEYS = frozenset({"bandwidth_gb_per_s", "latency_us"})


def _link(data: dict, key: str, source: str) -> Link:
    raw = data.get(key)
    if not isinstance(raw, dict):
        raise InputError("must be a mapping with bandwidth_gb_per_s and latency_us", source=source, field=key)
    check_keys(raw, _LINK_KEYS, source=source, section=key)
    return Link(
        bandwidth_gb_per_s=_physical(raw, "bandwidth_gb_per_s", source=source, section=key,
                                     limit_key="<link>.bandwidth_gb_per_s"),
        latency_us=_physical(raw, "latency_us", source=source, section=key, limit_key="<link>.latency_us",
                             positive=False, minimum=0),
    )


# The first NVIDIA compute capability whose tensor cores run a precision (CUDA programming guide, the MMA shapes per
# architecture; PTX ISA tcgen05.mma .kind::mxf8f6f4 and .kind::mxf4nvf4): fp8 from Ada (8.9), the block-scaled
# and 4-bit formats from Blackwell (10.0).  A profile listing a peak its stated capability has no units for is
# contradictory: one of the two is a slip (a copied Hopper profile with cc 8.0 planned fp8 on an Ampere).
FIRST_CAPABILITY = MappingProxyType({"fp8": 8.9, "mxfp8": 10.0, "fp4": 10.0, "nvfp4": 10.0, "mxfp4": 10.0})


def _check_capability_peaks(data: dict, peaks: Mapping[str, float], source: str) -> None:
    if data.get("vendor", "nvidia") != "nvidia":
        return
    cc = data.get("compute_capability")
    if isinstance(cc, bool) or not isinstance(cc, (int, float)):
        return  # absent, or refused with its own message below
    for precision, first in FIRST_CAPABILITY.items():
        if precision in peaks and cc < first:
            raise InputError(f"compute_capability >= {first:g} must hold for a {precision} peak (the first NVIDIA "
                             f"GPUs with {precision} tensor cores), but got (compute_capability={cc:g}, "
                             f"peak_tflops.{precision}={peaks[precision]:g}); fix the capability or drop the peak",
                             source=source, field="compute_capability")


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
    if data.get("vendor") == "amd" and data.get("compute_capability") is not None:
        raise InputError(f"must be left out of an AMD profile (it is NVIDIA's CUDA version), but got (compute_capability="
                         f"{data['compute_capability']!r}, vendor='amd'); remove one of them", source=source,
                         field="compute_capability")
    peaks_raw = data.get("peak_tflops")
    if not isinstance(peaks_raw, dict) or not peaks_raw:
        raise InputError("must map precisions (e.g. bf16, fp8) to dense TFLOP/s", source=source, field="peak_tflops")
    check_keys(peaks_raw, frozenset(PRECISIONS), source=source, section="peak_tflops")
    peaks = {p: float(_physical(peaks_raw, p, source=source, section="peak_tflops", limit_key="peak_tflops"))
             for p in PRECISIONS if p in peaks_raw}
    if "bf16" not in peaks:
        raise InputError("must list bf16 (the reference precision for MFU)", source=source, field="peak_tflops.bf16")
    for name, peak in peaks.items():
        if peak < PEAK_RATIO_FLOOR * peaks["bf16"]:
            raise InputError(f"must be at least {PEAK_RATIO_FLOOR:g} of the bf16 peak ({peaks['bf16']:g} TFLOP/s), "
                             f"but got {peak:g}; give TFLOP/s, not the PFLOP/s a datasheet may print",
                             source=source, field=f"peak_tflops.{name}")
    peaks.setdefault("fp16", peaks["bf16"])
    for block, base in BLOCK_SCALED_BASE.items():
        if block in peaks and base not in peaks:
            raise InputError(f"lists {block} but not {base}, the format it runs on", source=source,
                             field=f"peak_tflops.{block}")
    sources = data.get("sources", {})
    if not isinstance(sources, dict):
        raise InputError("must map field names to their sources", source=source, field="sources")
    eff_raw = data.get("efficiency")
    eff_raw = {} if eff_raw is None else eff_raw  # an empty section is no section; 0, [] or "" is not a mapping
    if not isinstance(eff_raw, dict):
        raise InputError("must be a mapping of parameter names to numbers", source=source, field="efficiency")
    tdp = _physical(data, "tdp_w", source=source)
    average_power = _physical(data, "average_power_w", source=source, limit_key="tdp_w", default=tdp)
    if average_power > tdp:  # the board caps its power at the TDP: more is a typo (or kW given for W)
        raise InputError(f"average_power_w <= tdp_w must hold (a board's power under load stays within its TDP), "
                         f"but got (average_power_w={average_power:g}, tdp_w={tdp:g})", source=source,
                         field="average_power_w")
    reference_raw = data.get("reference_efficiency")
    reference_raw = {} if reference_raw is None else reference_raw
    if not isinstance(reference_raw, dict):
        raise InputError("must map gemm / fp8_gemm to measured fractions of the peak", source=source,
                         field="reference_efficiency")
    check_keys(reference_raw, REFERENCE_KEYS, source=source, section="reference_efficiency")
    reference = {k: loading.number(reference_raw, k, source=source, section="reference_efficiency", maximum=1.0)
                 for k in reference_raw}
    gpus_per_node = _physical(data, "gpus_per_node", source=source, integer=True)
    domain = _physical(data, "scale_up_domain_gpus", source=source, integer=True, default=None)
    if domain is not None and (domain < gpus_per_node or domain % gpus_per_node):
        raise InputError(f"must be a multiple of gpus_per_node ({gpus_per_node}), but got {domain}", source=source,
                         field="scale_up_domain_gpus")
    if "scale_up" in data and (domain is None or domain == gpus_per_node):
        raise InputError("is the link between the nodes of a scale-up domain; give scale_up_domain_gpus larger "
                         "than gpus_per_node with it", source=source, field="scale_up")
    _check_capability_peaks(data, peaks, source)
    if "price_usd_per_gpu_hour" in data and data["price_usd_per_gpu_hour"] is None:
        raise InputError("has no value; where no public price exists, give a documented estimate, set "
                         "price_estimated: true and say how it was made under sources", source=source,
                         field="price_usd_per_gpu_hour")
    return Hardware(
        name=loading.text(data, "name", source=source, blank=False),
        description=loading.text(data, "description", source=source, default=""),
        peak_tflops=MappingProxyType(peaks),
        memory_gib=_physical(data, "memory_gib", source=source),
        memory_bandwidth_gb_per_s=_physical(data, "memory_bandwidth_gb_per_s", source=source),
        gpus_per_node=gpus_per_node,
        intra_node=_link(data, "intra_node", source),
        inter_node=_link(data, "inter_node", source),
        host_link_bandwidth_gb_per_s=_physical(data, "host_link_bandwidth_gb_per_s", source=source),
        cpu_optimizer_params_per_s=_physical(data, "cpu_optimizer_params_per_s", source=source),
        tdp_w=tdp,
        average_power_w=average_power,
        price_usd_per_gpu_hour=_price(data, source),
        efficiency=efficiency_from_mapping(eff_raw, source=source),
        sources=MappingProxyType({str(k): str(v) for k, v in sources.items()}),
        calibrated=loading.boolean(data, "calibrated", source=source, default=False),
        reference_efficiency=MappingProxyType(reference),
        scale_up_domain_gpus=domain,
        scale_up=_link(data, "scale_up", source) if "scale_up" in data else None,
        price_estimated=loading.boolean(data, "price_estimated", source=source, default=False),
        # a host ten times faster per framework op than a Xeon 8480C does not exist; 1e-308 made host ops free
        host_op_scale=loading.number(data, "host_op_scale", source=source, default=1.0, minimum=0.1, maximum=100.0),
        vendor=loading.text(data, "vendor", source=source, default="nvidia", choices=VENDORS),
        compute_capability=loading.number(data, "compute_capability", source=source, default=None, positive=False,
                                          minimum=1.0, maximum=99.9),
    )


_OPTIONAL_FIELDS = ("scale_up_domain_gpus", "scale_up", "price_estimated", "host_op_scale", "vendor",
                    "compute_capability")


def borrowed_name_note(path: str) -> str:
    """What to say of a profile file that names itself as a bundled profile (or an alias of one) with other figures
    (its price aside): it is read as the file says, but headlines, error bands and --calibration overlays go by the
    name, so H100 figures named a100-sxm4-80gb read as an A100 with the A100's validated band.  "" otherwise."""
    if not Path(path).is_file():
        return ""
    data, source = read_named("hardware", path, what="hardware", field="--hardware", alternative="")
    hw = hardware_from_mapping(data, source=source)
    bundled_name = hw.name if hw.name in hardware_names() else resolve_hardware_name(hw.name)
    if bundled_name is None:
        return ""
    data, bundled_source = read_named("hardware", bundled_name, what="hardware", field="--hardware", alternative="")
    mine, theirs = (hardware_to_mapping(h) for h in (hw, hardware_from_mapping(data, source=bundled_source)))
    # in the profile's own order (compute, memory, bandwidth, links, ...), the figures that decide a plan first
    differ = [k for k in [*mine, *(k for k in theirs if k not in mine)]
              if k not in ("name", "price_usd_per_gpu_hour", "price_estimated") and mine.get(k) != theirs.get(k)]
    if not differ:
        return ""
    return (f"{path} names itself {hw.name!r}, a bundled profile, with other figures ({', '.join(differ[:3])}"
            f"{', ...' if len(differ) > 3 else ''}): it is planned as the file says, but the bundled profile's error "
            "bands and any calibration overlay for that name apply to it; give it a name of its own (name: my-gpu)")


def hardware_to_mapping(hw: Hardware) -> dict:
    """The profile as plain data (what a profile YAML holds, less description and sources, with any calibration
    and --price applied): ``hardware_from_mapping`` reads it back.  Studies store it in their problem record and
    ``plans.json`` embeds it, so a custom profile is read back from anywhere."""
    out = {}
    for f in dataclasses.fields(hw):
        if f.name in ("sources", "description"):
            continue
        value = getattr(hw, f.name)
        if value is None or (f.name in _OPTIONAL_FIELDS and value == f.default):
            continue  # unset optional fields stay out, so records of older profiles keep their form
        if dataclasses.is_dataclass(value):
            value = dataclasses.asdict(value)
        elif isinstance(value, Mapping):
            value = dict(value)
        out[f.name] = value
    return out


def hardware_names() -> list[str]:
    return bundled_names("hardware")


def hardware_aliases() -> Mapping[str, str]:
    """Other names of bundled profiles (profiles/catalogue/hardware_aliases.yaml), keyed in lower case."""
    path = bundled_dir("catalogue") / "hardware_aliases.yaml"
    source = f"profiles/catalogue/{path.name}"
    data = loading.read_mapping(path)
    check_keys(data, frozenset({"aliases"}), source=source)
    aliases = data.get("aliases")
    if not isinstance(aliases, dict) or not all(isinstance(v, str) for v in aliases.values()):
        raise InputError("must map names to bundled profile names", source=source, field="aliases")
    return MappingProxyType({str(k).lower(): v for k, v in aliases.items()})


def _squashed(name: str) -> str:
    """A GPU name with what does not tell GPUs apart dropped: case, a leading ``other:`` (serving_silicon.csv's label
    for GPUs that had no profile) or ``NVIDIA``, and the separators (spaces, ``-``, ``_``): ``GB200 NVL72``,
    ``gb200_nvl72`` and ``gb200-nvl72`` are one name, as are ``NVIDIA B200`` and ``b200``."""
    key = name.strip().lower()
    if key.startswith("other:"):
        key = key[len("other:"):].strip()
    key = re.sub(r"^nvidia(?=[\s_-])", "", key)
    return re.sub(r"[\s_-]+", "", key)


def _squashed_names() -> dict[str, str]:
    """Every bundled profile's name and alias, squashed (``_squashed``), to the profile it names."""
    names = {_squashed(alias): profile for alias, profile in hardware_aliases().items()}
    names.update({_squashed(profile): profile for profile in hardware_names()})
    return names


def resolve_hardware_name(name: str) -> str | None:
    """The bundled profile an alias names (``b300``, ``gb200``, ``other: b300_sxm``), or None.  Case, separators and
    a leading ``other:`` or ``NVIDIA`` do not matter (``GB200 NVL72``, ``NVIDIA H100 80GB HBM3``, ``B300 SXM``)."""
    key = name.strip().lower()
    if key.startswith("other:"):
        key = key[len("other:"):].strip()
    if key in hardware_names():
        return key
    exact = hardware_aliases().get(key)
    return exact if exact is not None else _squashed_names().get(_squashed(name))


def ambiguous_hardware_name(name: str) -> list[str]:
    """The bundled profiles a name that resolves to none is the start of (``h100``: h100-sxm5-80gb and
    h100-sxm5-96gb-500w), when it names more than one; else []."""
    key = _squashed(name)
    if not key or resolve_hardware_name(name) is not None:
        return []
    found = sorted(p for p in hardware_names() if _squashed(p).startswith(key))
    return found if len(found) > 1 else []


def unknown_hardware_reason(name: str) -> str:
    """Why a GPU name maps to no bundled profile, as a sentence fragment (a measured row's skip reason)."""
    candidates = ambiguous_hardware_name(name)
    if candidates:
        return f"GPU {name!r} names more than one bundled profile ({', '.join(candidates)}); write one of them"
    return f"GPU {name!r} has no bundled profile"


def load_hardware(name_or_path: str) -> Hardware:
    """Load a bundled profile by name or alias, or a profile YAML by path."""
    require_name(name_or_path, kind="hardware", what="hardware profile", field="--hardware")
    if ("," in name_or_path and not Path(name_or_path).exists()
            and all(part.strip() in hardware_names() or resolve_hardware_name(part.strip()) is not None
                    for part in name_or_path.split(","))):
        # a list read as one name was refused as unknown while the names it lists are bundled ones
        raise InputError(f"takes one hardware profile here, but got {name_or_path!r}; give one of them (a "
                         "comma-separated list is for capacity planning only: a training `autotune search -H A,B "
                         "--tokens N`)", field="--hardware")
    if not Path(name_or_path).exists() and name_or_path not in hardware_names():
        alias = resolve_hardware_name(name_or_path)
        if alias is not None:
            name_or_path = alias
        elif ambiguous_hardware_name(name_or_path):
            raise InputError(f"{name_or_path!r} names more than one bundled profile: "
                             f"{', '.join(ambiguous_hardware_name(name_or_path))}; give one of them",
                             field="--hardware")
    data, source = read_named("hardware", name_or_path, what="hardware", field="--hardware",
                              alternative="or an alias of profiles/catalogue/hardware_aliases.yaml, "
                                          "or pass a path to a profile YAML")
    return hardware_from_mapping(data, source=source)
