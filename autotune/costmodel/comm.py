"""Collective communication times (alpha-beta model of NCCL ring/tree collectives).

All functions take numpy arrays (one entry per plan) and return seconds.

A group of ``n`` ranks whose members are ``stride`` ranks apart lands
``per_node = min(n, gpus_per_node // stride)`` members in each node it touches
(at least 1) and spans ``n / per_node`` nodes.  Bandwidth terms:

* inside a node, NCCL's bus bandwidth is the NVLink (or PCIe) link bandwidth per
  GPU times ``efficiency.intra_node_bandwidth``;
* across nodes, each node's outbound share of the data leaves through its
  ``per_node`` NICs, each at the NIC bandwidth times ``efficiency.inter_node_bandwidth``.
  For a ring all-reduce this gives ``2(k-1)/k * M / (per_node * nic)`` for k
  nodes, the same as nccl-tests' busbw relation busbw = nic*(n-1)/(k-1)
  (ml-engineering network benchmarks).

The two tiers run concurrently, so a collective takes the slower of the two plus
its latency.  All-reduce: ring steps inside the node at the link's per-hop latency, and a
tree (``2*ceil(log2 k)`` hops) across nodes, as NCCL picks trees at scale
(NCCL ``src/graph/tuning.cc``).  All-gather and reduce-scatter have no tree in NCCL:
their ring latency grows with the group (``_ring_latency``).  Known deviation: NVLS/SHARP in-switch reduction
and message-size-dependent protocol choice are folded into the efficiencies.
"""

from __future__ import annotations

import numpy as np

from ..inputs.hardware import Cluster


class Topology:
    """Per-plan placement of one process group: members per node and nodes spanned."""

    __slots__ = ("n", "per_node", "nodes")

    def __init__(self, n: np.ndarray, stride: np.ndarray, gpus_per_node: int):
        n = np.asarray(n, dtype=np.float64)
        stride = np.asarray(stride, dtype=np.float64)
        per_node = np.clip(np.floor(gpus_per_node / stride), 1.0, None)
        self.n = n
        self.per_node = np.minimum(per_node, n)
        self.nodes = np.ceil(n / self.per_node)


def _bandwidths(cluster: Cluster) -> tuple[float, float]:
    hw = cluster.hardware
    intra = hw.intra_node.bandwidth_gb_per_s * 1e9 * hw.efficiency.intra_node_bandwidth
    inter = hw.inter_node.bandwidth_gb_per_s * 1e9 * hw.efficiency.inter_node_bandwidth
    return intra, inter


def _latency(topo: Topology, cluster: Cluster, ring_steps_per_rank: float) -> np.ndarray:
    hw = cluster.hardware
    intra_steps = ring_steps_per_rank * (topo.per_node - 1.0)
    inter_steps = 2.0 * np.ceil(np.log2(np.maximum(topo.nodes, 1.0)))
    latency = intra_steps * hw.intra_node.latency_us + inter_steps * hw.inter_node.latency_us
    return np.where(topo.n > 1, latency * 1e-6, 0.0)


def all_reduce_s(message_bytes: np.ndarray, topo: Topology, cluster: Cluster) -> np.ndarray:
    """Ring all-reduce of ``message_bytes`` on every rank of the group."""
    intra_bw, inter_bw = _bandwidths(cluster)
    intra = 2.0 * (topo.per_node - 1.0) / topo.per_node * message_bytes / intra_bw
    inter = 2.0 * (topo.nodes - 1.0) / topo.nodes * message_bytes / (topo.per_node * inter_bw)
    return np.maximum(intra, inter) + _latency(topo, cluster, 2.0)


def _ring_latency(topo: Topology, cluster: Cluster) -> np.ndarray:
    """Latency of a ring all-gather / reduce-scatter: ``n - 1`` steps, ``nodes - 1`` of them across nodes.

    NCCL runs these two collectives as rings only (no tree; NCCL ``src/graph/tuning.cc``:
    ``nsteps = nRanks - 1``, ``nInterSteps = nNodes - 1``, latency = intra-node steps x NVLink
    latency + inter-node steps x network latency), so their latency grows linearly with the
    group -- what FSDP/ZeRO-3 at hundreds of ranks pays once per layer.
    """
    hw = cluster.hardware
    inter_steps = topo.nodes - 1.0
    intra_steps = np.maximum(topo.n - 1.0 - inter_steps, 0.0)
    latency = intra_steps * hw.intra_node.latency_us + inter_steps * hw.inter_node.latency_us
    return np.where(topo.n > 1, latency * 1e-6, 0.0)


def all_gather_s(message_bytes: np.ndarray, topo: Topology, cluster: Cluster, nics: np.ndarray | float | None = None) -> np.ndarray:
    """All-gather (or reduce-scatter) whose *full* tensor is ``message_bytes``: half an all-reduce's bandwidth.

    ``nics``: how many of a node's NICs the collective's rings use at once (default: one per
    member in the node, NCCL's channels spread over all of them).  A collective of many tiny
    per-rank chunks runs on fewer channels (NCCL cuts the channel count until each channel has
    enough work), so its cross-node traffic leaves through fewer NICs; see ``SUBMODULE_GRANULAR``.
    """
    intra_bw, inter_bw = _bandwidths(cluster)
    lanes = topo.per_node if nics is None else np.minimum(topo.per_node, nics)
    intra = (topo.per_node - 1.0) / topo.per_node * message_bytes / intra_bw
    inter = (topo.nodes - 1.0) / topo.nodes * message_bytes / (lanes * inter_bw)
    return np.maximum(intra, inter) + _ring_latency(topo, cluster)


reduce_scatter_s = all_gather_s


def all_to_all_s(message_bytes: np.ndarray, topo: Topology, cluster: Cluster) -> np.ndarray:
    """All-to-all where every rank holds ``message_bytes`` and keeps 1/n of it."""
    intra_bw, inter_bw = _bandwidths(cluster)
    n = np.maximum(topo.n, 1.0)
    intra = (topo.per_node - 1.0) / n * message_bytes / intra_bw
    # Data for other nodes leaves through this GPU's own NIC.
    inter = (n - topo.per_node) / n * message_bytes / inter_bw
    return np.maximum(intra, inter) + _latency(topo, cluster, 1.0)


def point_to_point_s(message_bytes: np.ndarray, crosses_nodes: np.ndarray, cluster: Cluster) -> np.ndarray:
    """One send/recv between neighbouring pipeline stages."""
    hw = cluster.hardware
    intra_bw, inter_bw = _bandwidths(cluster)
    bw = np.where(crosses_nodes, inter_bw, intra_bw)
    latency = np.where(crosses_nodes, hw.inter_node.latency_us, hw.intra_node.latency_us) * 1e-6
    return message_bytes / bw + latency
