"""Building the cost model's three inputs from command-line values, with readable errors."""

from __future__ import annotations

from dataclasses import dataclass

from .errors import InputError
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


def training_inputs(
    model: str, hardware: str, gpus: int | None, gpus_per_node: int | None, nodes: int | None,
    seq_len: int, global_batch: int, tokens: float | None, price: float | None, calibration: str | None = None,
) -> TrainingInputs:
    spec = load_model(model)
    hw = load_hardware(hardware)
    if calibration:
        from .calibration import apply_calibration, load_calibration

        hw = apply_calibration(hw, load_calibration(calibration))
    if price is not None:
        if price < 0:
            raise InputError(f"must be >= 0 USD per GPU-hour, but got {price}", field="--price")
        hw = hw.with_price(price)
    cluster = cluster_from_options(hw, gpus, gpus_per_node, nodes)
    if seq_len < 1:
        raise InputError(f"must be >= 1, but got {seq_len}", field="--seq-len")
    if global_batch < 1:
        raise InputError(f"must be >= 1 sequence, but got {global_batch}", field="--global-batch")
    if tokens is not None and tokens <= 0:
        raise InputError(f"must be > 0, but got {tokens}", field="--tokens")
    return TrainingInputs(spec, cluster, TrainWorkload(seq_len=seq_len, global_batch=global_batch, tokens=tokens))
