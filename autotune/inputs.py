"""Building the cost model's three inputs from command-line values, with readable errors."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError
from .framework import Framework, load_framework
from .hardware import Cluster, Hardware, load_hardware
from .modelspec import ModelSpec, load_model
from .workload import TrainWorkload


def cluster_from_options(hardware: Hardware, gpus: int | None, gpus_per_node: int | None, nodes: int | None) -> Cluster:
    """Resolve --gpus / --gpus-per-node / --nodes (any two determine the third)."""
    gpn = gpus_per_node or hardware.gpus_per_node
    if gpus_per_node is not None and gpus_per_node < 1:
        raise InputError(f"must be >= 1, but got {gpus_per_node}", field="--gpus-per-node")
    if nodes is not None and nodes < 1:
        raise InputError(f"must be >= 1, but got {nodes}", field="--nodes")
    if gpus is None and nodes is None:
        raise InputError("give the cluster size with --gpus N (or --nodes N)", field="--gpus")
    if gpus is None:
        gpus = nodes * gpn
    elif nodes is not None and nodes * gpn != gpus:
        raise InputError(f"--nodes {nodes} x --gpus-per-node {gpn} = {nodes * gpn}, but --gpus is {gpus}; give two of the three",
                         field="--gpus")
    if gpus < 1:
        raise InputError(f"must be >= 1, but got {gpus}", field="--gpus")
    if gpus > gpn and gpus % gpn:
        raise InputError(f"{gpus} GPUs do not fill whole nodes of {gpn}; use a multiple of {gpn} or set --gpus-per-node",
                         field="--gpus")
    return Cluster(hardware=hardware, n_gpus=gpus, gpus_per_node=min(gpn, gpus))


@dataclass(frozen=True)
class TrainingInputs:
    model: ModelSpec
    cluster: Cluster
    workload: TrainWorkload
    framework: Framework = field(default_factory=load_framework)


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
    framework: str | None = None  # NAME[@VERSION]; None: autotune.framework.DEFAULT_FRAMEWORK

    def build(self) -> TrainingInputs:
        """The validated model, cluster, workload and framework; raises :class:`InputError` naming the flag at fault."""
        framework = load_framework(self.framework)
        spec = load_model(self.model)
        hw = load_hardware(self.hardware)
        if self.calibration:
            from .calibration import apply_calibration, load_calibration

            hw = apply_calibration(hw, load_calibration(self.calibration))
        if self.price is not None:
            if self.price < 0:
                raise InputError(f"must be >= 0 USD per GPU-hour, but got {self.price}", field="--price")
            hw = hw.with_price(self.price)
        cluster = cluster_from_options(hw, self.gpus, self.gpus_per_node, self.nodes)
        if self.seq_len < 1:
            raise InputError(f"must be >= 1, but got {self.seq_len}", field="--seq-len")
        if self.global_batch < 1:
            raise InputError(f"must be >= 1 sequence, but got {self.global_batch}", field="--global-batch")
        if self.tokens is not None and self.tokens <= 0:
            raise InputError(f"must be > 0, but got {self.tokens}", field="--tokens")
        workload = TrainWorkload(seq_len=self.seq_len, global_batch=self.global_batch, tokens=self.tokens)
        return TrainingInputs(spec, cluster, workload, framework)


def training_inputs(
    model: str, hardware: str, gpus: int | None, gpus_per_node: int | None, nodes: int | None,
    seq_len: int, global_batch: int, tokens: float | None, price: float | None, calibration: str | None = None,
    framework: str | None = None,
) -> TrainingInputs:
    """Positional shorthand for ``TrainingRequest(...).build()`` (kept for tests and scripts)."""
    return TrainingRequest(model=model, hardware=hardware, gpus=gpus, gpus_per_node=gpus_per_node, nodes=nodes,
                           seq_len=seq_len, global_batch=global_batch, tokens=tokens, price=price,
                           calibration=calibration, framework=framework).build()


@dataclass(frozen=True, kw_only=True)
class SearchSettings:
    """How to search: the space and its pinned axes (``fixes``, already parsed), the sampler and what to rank by."""

    space: str | None = None
    fixes: Mapping[str, Any] = field(default_factory=dict)
    sampler: str = "auto"
    trials: int = 200
    seed: int = 0
    objective: str = "throughput"
    top: int = 10
    precisions: tuple[str, ...] = ("bf16",)  # GEMM precisions searched (--precision)
    memory_headroom: float = 0.03  # fraction of HBM ranked plans leave free (--memory-headroom)
