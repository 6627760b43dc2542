"""The inputs as a person states them on the command line, checked once and turned into frozen values.

Errors are :class:`~autotune.errors.InputError` naming the flag at fault and a fix.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import InputError
from .calibration import calibrated_hardware
from .framework import Framework, load_framework
from .hardware import (MAX_PRICE_USD_PER_GPU_HOUR, MAX_SCALE_UP_GPUS, MIN_PRICE_USD_PER_GPU_HOUR, Cluster, Hardware,
                       hardware_from_mapping, load_hardware)
from .modelspec import ModelSpec, load_model
from .workload import ServeWorkload, TrainWorkload, capacity_factor_problem, tokens_problem

# More GPUs than this is a typo, not a cluster (the largest are a few hundred thousand).
MAX_GPUS = 10_000_000
_RANGE = re.compile(r"^\s*([0-9]+)\s*(?:\.\.|-|:)\s*([0-9]+)\s*$")  # ASCII digits: int() also reads others


def parse_gpus(text: str | int | None) -> tuple[int | None, tuple[int, int] | None]:
    """``"64"`` -> ``(64, None)``; ``"64..4096"`` -> ``(None, (64, 4096))``; ``None`` -> ``(None, None)``."""
    if text is None:
        return None, None
    if isinstance(text, int):
        return parse_gpus(str(text))[0], None
    raw = str(text).strip()
    if re.fullmatch(r"[+-]?[0-9]+", raw):  # int() would also take "1_000" and other scripts' digits
        count = int(raw)
        if count > MAX_GPUS:
            raise InputError(f"must be at most {MAX_GPUS:,}, but got {count:,}", field="--gpus")
        return count, None
    match = _RANGE.match(raw)
    if not match:
        raise InputError(f"must be a GPU count (64) or a range LOW..HIGH (64..4096), but got {raw!r}", field="--gpus")
    low, high = int(match.group(1)), int(match.group(2))
    if high > MAX_GPUS:
        raise InputError(f"must be at most {MAX_GPUS:,} GPUs, but got {raw!r}", field="--gpus")
    if low < 1 or high < low:
        raise InputError(f"the range needs 1 <= LOW <= HIGH, but got {raw!r}; e.g. 64..4096", field="--gpus")
    return None, (low, high)


def single_gpu_count(text: str | int | None) -> int | None:
    """One GPU count (``predict``, ``explain``, ``emit`` and ``tune`` take no range): a whole number, or a range of
    one count (``64..64``)."""
    if text is None or isinstance(text, int):
        return parse_gpus(text)[0]
    raw = str(text).strip()
    if not re.fullmatch(r"[+-]?[0-9]+", raw) and not _RANGE.match(raw):
        raise InputError(f"must be one GPU count, a whole number such as --gpus 64, but got {raw!r}", field="--gpus")
    span = _RANGE.match(raw)
    if span and int(span.group(1)) != int(span.group(2)):  # before parse_gpus, whose fixes are ranges
        low, high = sorted((max(int(span.group(1)), 1), max(int(span.group(2)), 1)))
        raise InputError(f"takes one GPU count, a whole number such as --gpus {low}, but got {raw!r}; a range "
                         f"LOW..HIGH plans capacity: `autotune search ... --gpus {low}..{high} --tokens N` (serving: "
                         "--request-rate R)",
                         field="--gpus")
    count, bounds = parse_gpus(raw)
    if bounds is not None:
        if bounds[0] == bounds[1]:
            return bounds[0]
        raise InputError(f"takes one GPU count, a whole number such as --gpus {bounds[0]}, but got {raw!r}; a range "
                         f"LOW..HIGH plans capacity: `autotune search ... --gpus {raw} --tokens N` (serving: --request-rate "
                         "R)", field="--gpus")
    return count




def check_price(price: float) -> None:
    """``--price`` is a finite USD amount per GPU-hour: 0 (GPUs already paid for), or from
    MIN_PRICE_USD_PER_GPU_HOUR to MAX_PRICE_USD_PER_GPU_HOUR."""
    if not 0 <= price <= MAX_PRICE_USD_PER_GPU_HOUR:
        raise InputError(f"0 <= --price <= {MAX_PRICE_USD_PER_GPU_HOUR:,.0f} USD per GPU-hour must hold, but got "
                         f"(--price={price:g}); give the price of one GPU for one hour, not of a node or a month",
                         field="--price")
    if 0 < price < MIN_PRICE_USD_PER_GPU_HOUR:
        raise InputError(f"--price = 0 or --price >= {MIN_PRICE_USD_PER_GPU_HOUR:g} USD per GPU-hour must hold (below "
                         f"any GPU's rent), but got (--price={price:g}); give the price of one GPU for one hour, not a "
                         "second or a minute, or 0 for GPUs already paid for", field="--price")


def priced_hardware(name: str, price: float | None) -> Hardware:
    """The profile ``name`` (bundled or a YAML path), with ``--price`` laid over it."""
    hw = load_hardware(name)
    if price is not None:
        check_price(price)
        hw = hw.with_price(price)
    return hw


def recorded_hardware(data: Mapping[str, Any], *, source: str) -> Hardware:
    """A profile as a plans.json or a study records it (``hardware_to_mapping``), at the price its search applied.

    --price takes 0 (GPUs already paid for, check_price), which a profile YAML may not state: a recorded price of 0
    is read as a price, not refused as a profile's, so that the search's result reads back where it was written."""
    price = data.get("price_usd_per_gpu_hour")
    if isinstance(price, (int, float)) and not isinstance(price, bool) and price == 0:
        return hardware_from_mapping({**data, "price_usd_per_gpu_hour": 1.0}, source=source).with_price(0.0)
    return hardware_from_mapping(dict(data), source=source)


MAX_GPUS_PER_NODE = MAX_SCALE_UP_GPUS  # a profile's gpus_per_node ceiling (inputs.hardware)


def cluster_from_options(hardware: Hardware, gpus: int | None, gpus_per_node: int | None, nodes: int | None) -> Cluster:
    """Resolve --gpus / --gpus-per-node / --nodes (any two determine the third)."""
    gpn = gpus_per_node or hardware.gpus_per_node
    if gpus_per_node is not None and gpus_per_node < 1:
        raise InputError(f"must be >= 1, but got {gpus_per_node}; e.g. --gpus-per-node 8", field="--gpus-per-node")
    if gpus_per_node is not None and gpus_per_node > MAX_GPUS_PER_NODE:
        # the ceiling a hardware profile's gpus_per_node has (inputs.hardware): the flag is no looser than the file
        raise InputError(f"must be <= {MAX_GPUS_PER_NODE:,} GPUs (a physical ceiling on GPUs in one node), but got "
                         f"{gpus_per_node:,}; e.g. --gpus-per-node 8", field="--gpus-per-node")
    if nodes is not None and nodes < 1:
        raise InputError(f"must be >= 1, but got {nodes}; e.g. --nodes 8", field="--nodes")
    if gpus is None and nodes is None:
        raise InputError("give the cluster size with --gpus N (or --nodes N)", field="--gpus")
    if gpus is None:
        gpus = nodes * gpn
        if gpus > MAX_GPUS:
            raise InputError(f"--nodes {nodes:,} x {gpn} GPUs per node must be at most {MAX_GPUS:,} GPUs, but got "
                             f"{gpus:,}", field="--nodes")
    elif nodes is not None and nodes * gpn != gpus:
        raise InputError(f"--nodes {nodes} x --gpus-per-node {gpn} = {nodes * gpn}, but --gpus is {gpus}; give two of the three",
                         field="--gpus")
    if gpus < 1:
        raise InputError(f"must be >= 1, but got {gpus}; e.g. --gpus {gpn}", field="--gpus")
    if gpus > gpn and gpus % gpn:
        raise InputError(f"{gpus} GPUs do not fill whole nodes of {gpn}; use a multiple of {gpn} or set --gpus-per-node",
                         field="--gpus")
    return Cluster(hardware=hardware, n_gpus=gpus, gpus_per_node=min(gpn, gpus))


def require_training(seq_len: int | None, global_batch: int | None) -> None:
    """Training needs --seq-len and --global-batch (optional flags, so that serving can leave them out)."""
    if seq_len is None:
        raise InputError("training needs the sequence length: --seq-len TOKENS (or --workload serve)", field="--seq-len")
    if global_batch is None:
        raise InputError("training needs the global batch: --global-batch SEQUENCES (or --workload serve)",
                         field="--global-batch")


def serve_workload(input_len: int | None, output_len: int | None, ttft_ms: float | None, tpot_ms: float | None,
                   concurrency: int | None, request_rate: float | None) -> ServeWorkload:
    if input_len is None:
        raise InputError("serving needs the prompt length: --input-len TOKENS", field="--input-len")
    if output_len is None:
        raise InputError("serving needs the output length: --output-len TOKENS", field="--output-len")
    return ServeWorkload(input_len, output_len, ttft_ms, tpot_ms, concurrency, request_rate)


def moe_workload_problem(model: ModelSpec, framework: Framework, workload: TrainWorkload) -> str | None:
    """Why a workload's mixture-of-experts settings cannot apply (None: they can): a dense model has no
    experts to balance or drop; a framework without expert capacity runs its MoE dropless."""
    stated = workload.moe_imbalance != 1.0 or workload.moe_capacity_factor is not None
    if stated and model.moe is None:
        return f"{model.name} is a dense model (no experts); drop the MoE workload settings"
    if workload.moe_capacity_factor is not None and not framework.moe_token_dropping:
        return (f"{framework.name} runs its mixture of experts dropless (no expert capacity); drop the capacity "
                "factor, or use a framework that drops tokens (megatron-lm, megatron-bridge, nemo)")
    return None


def max_moe_imbalance(model: ModelSpec) -> float | None:
    """The most tokens an expert-parallel rank can receive over the mean (None for a dense model): every token
    once per expert it holds, so E/k times the mean with one of the E experts per rank (k routed per token); a
    plan of ep ranks caps it at ep (TrainWorkload.moe_expert_load)."""
    return None if model.moe is None else model.moe.n_experts / model.moe.top_k


def moe_imbalance_note(workload: TrainWorkload, eps: Iterable[int], best_ep: int | None = None) -> str | None:
    """What --moe-imbalance does to plans of these ep sizes, when that is less than asked (None: it applies as
    given): nothing with ep=1 (every rank holds all the experts), at most ep times the mean otherwise.  With
    ``best_ep`` (a search's best plan), also when the space holds other sizes but the best plan is one of those."""
    x = workload.moe_imbalance
    if workload.moe_capacity_factor is not None or x == 1.0:
        return None
    sizes = sorted(set(int(e) for e in eps))
    if sizes == [1]:
        return (f"--moe-imbalance {x:g} has no effect with ep=1: every rank holds all the experts and receives the "
                "mean share of tokens; it applies to plans with ep > 1 (search them, or --fix ep=N)")
    if best_ep == 1:
        return (f"--moe-imbalance {x:g} applies to plans with ep > 1 only (with ep=1 every rank holds all the experts "
                "and receives the mean share of tokens), and the best plan has ep=1")
    one = sizes[0] if len(sizes) == 1 else best_ep
    if one is not None and 1 < one < x:
        return (f"--moe-imbalance {x:g} is capped at {one} with ep={one}: the busiest of {one} "
                f"expert-parallel ranks receives at most {one} times the mean")
    return None


@dataclass(frozen=True)
class TrainingInputs:
    model: ModelSpec
    cluster: Cluster
    workload: TrainWorkload
    framework: Framework = field(default_factory=load_framework)
    # the --calibration overlay's file name, whose efficiencies the cluster's hardware already holds: kept so that
    # search, plans.json and the report say which fit their numbers come from
    calibration: str | None = None


@dataclass(frozen=True, kw_only=True)
class TrainingRequest:
    """A training problem as given on the command line; :meth:`build` checks it and loads what it names."""

    model: str
    hardware: str
    gpus: int | None = None
    gpus_per_node: int | None = None
    nodes: int | None = None
    seq_len: int
    global_batch: int
    tokens: float | None = None
    price: float | None = None
    calibration: str | None = None
    framework: str | None = None  # NAME[@VERSION]; None: autotune.inputs.framework.DEFAULT_FRAMEWORK
    moe_imbalance: float | None = None  # --moe-imbalance; None: 1.0
    moe_capacity_factor: float | None = None  # --moe-capacity-factor; None: dropless

    def build(self) -> TrainingInputs:
        """The validated model, cluster, workload and framework; raises :class:`InputError` naming the flag at fault."""
        framework = load_framework(self.framework)
        spec = load_model(self.model)
        hw = load_hardware(self.hardware)
        if self.calibration is not None:
            hw = calibrated_hardware(hw, self.calibration)
        if self.price is not None:
            check_price(self.price)
            hw = hw.with_price(self.price)
        cluster = cluster_from_options(hw, self.gpus, self.gpus_per_node, self.nodes)
        if self.seq_len < 1:
            raise InputError(f"must be >= 1, but got {self.seq_len}", field="--seq-len")
        if self.global_batch < 1:
            raise InputError(f"must be >= 1 sequence, but got {self.global_batch}", field="--global-batch")
        problem = tokens_problem(self.tokens, self.seq_len, self.global_batch)
        if problem:
            raise InputError(f"{problem}; give the whole training budget, e.g. --tokens 1.5e12", field="--tokens")
        imbalance = 1.0 if self.moe_imbalance is None else self.moe_imbalance
        if not imbalance >= 1.0:
            raise InputError(f"must be >= 1 (the busiest rank's tokens over the mean), but got {imbalance}",
                             field="--moe-imbalance")
        capacity = self.moe_capacity_factor
        if capacity_factor_problem(capacity):
            raise InputError(capacity_factor_problem(capacity), field="--moe-capacity-factor")
        workload = TrainWorkload(seq_len=self.seq_len, global_batch=self.global_batch, tokens=self.tokens,
                                 moe_imbalance=imbalance, moe_capacity_factor=capacity)
        problem = moe_workload_problem(spec, framework, workload)
        if problem:
            flag = "--moe-capacity-factor" if capacity is not None else "--moe-imbalance"
            raise InputError(problem, field=flag)
        most = max_moe_imbalance(spec)
        if most is not None and imbalance > most:
            raise InputError(f"1 <= imbalance <= {most:g} must hold for {spec.name}, but got (moe_imbalance="
                             f"{imbalance:g}): with {spec.moe.n_experts} experts, {spec.moe.top_k} per token, the "
                             f"busiest expert-parallel rank receives at most every token, {most:g} times the mean "
                             "(one expert per rank); on a plan of ep ranks at most ep times", field="--moe-imbalance")
        named = None if self.calibration is None else Path(self.calibration).name
        return TrainingInputs(spec, cluster, workload, framework, named)


def training_inputs(
    model: str, hardware: str, gpus: int | None, gpus_per_node: int | None, nodes: int | None,
    seq_len: int, global_batch: int, tokens: float | None, price: float | None, calibration: str | None = None,
    framework: str | None = None,
) -> TrainingInputs:
    """Positional shorthand for ``TrainingRequest(...).build()`` (kept for tests and scripts)."""
    return TrainingRequest(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                           seq_len=seq_len, global_batch=global_batch, tokens=tokens, price=price,
                           calibration=calibration, framework=framework).build()
