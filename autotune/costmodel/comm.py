"""Collective communication times (alpha-beta model of NCCL ring/tree collectives).

All functions take numpy arrays (one entry per plan) and return seconds.

A group of ``n`` ranks whose members are ``stride`` ranks apart lands
``per_node = min(n, gpus_per_node // stride)`` members in each node it touches
(at least 1) and spans ``n / per_node`` nodes; likewise ``per_domain`` members in each
NVLink (scale-up) domain and ``domains`` domains.  On HGX boards the domain is the node;
an NVL72 rack is a domain of 72 GPUs in nodes (trays) of 4 (:func:`usable_domain`).
Bandwidth terms:

* inside the domain, NCCL's bus bandwidth is the NVLink (or PCIe) link bandwidth per
  GPU times ``efficiency.intra_node_bandwidth``: the node's ``intra_node`` link, or the
  ``scale_up`` link where the group's members in a domain sit in several nodes (NVL72
  trays joined by the rack's NVLink switches);
* across domains, each domain's outbound share of the data leaves through its
  ``per_domain`` NICs, each at the NIC bandwidth times ``efficiency.inter_node_bandwidth``.
  For a ring all-reduce this gives ``2(k-1)/k * M / (per_domain * nic)`` for k
  domains, the same as nccl-tests' busbw relation busbw = nic*(n-1)/(k-1)
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


def usable_domain(cluster: Cluster) -> int:
    """GPUs of one NVLink domain that process groups use (``Cluster.usable_scale_up_domain``): the whole domain
    where the job fills its domains (or fits in one), else 64 of an NVL72 rack's 72 GPUs; the node on HGX boards."""
    return cluster.usable_scale_up_domain


class Topology:
    """Per-plan placement of one process group: members per node and per NVLink domain, nodes and
    domains spanned.  ``gpus_per_domain`` defaults to the node (HGX)."""

    __slots__ = ("n", "per_node", "nodes", "per_domain", "domains", "scale_up")

    def __init__(self, n: np.ndarray, stride: np.ndarray, gpus_per_node: int, gpus_per_domain: int | None = None):
        n = np.asarray(n, dtype=np.float64)
        stride = np.asarray(stride, dtype=np.float64)
        domain = float(gpus_per_domain or gpus_per_node)
        per_node = np.minimum(np.clip(np.floor(gpus_per_node / stride), 1.0, None), n)
        per_domain = np.maximum(np.minimum(np.clip(np.floor(domain / stride), 1.0, None), n), per_node)
        self.n = n
        self.per_node = per_node
        self.nodes = np.ceil(n / per_node)
        self.per_domain = per_domain
        self.domains = np.ceil(n / per_domain)
        # Members of one domain sit in several nodes: they talk over the scale-up link (NVL72 switch trays).
        self.scale_up = per_domain > per_node

    @classmethod
    def of(cls, cluster: Cluster, n: np.ndarray, stride: np.ndarray) -> "Topology":
        domain = usable_domain(cluster)
        topo = cls(n, stride, cluster.gpus_per_node, domain)
        # Groups tile the ranks in blocks of n * stride.  Where the job fills its NVLink domains and a block does not
        # divide one (EP 32 on 288 GB200 GPUs: 72 = 2 * 32 + 8), some blocks straddle two domains: the slowest group
        # of such a collective (the step waits for it) is split evenly at worst, half its members in each domain
        # (Cluster.link_tier's rule, which the launch files follow).
        if domain > cluster.gpus_per_node and cluster.n_gpus > cluster.gpus_per_scale_up_domain:
            block = np.asarray(n, dtype=np.float64) * np.asarray(stride, dtype=np.float64)
            racks = -(-cluster.n_gpus // domain)  # Cluster.domains_hold_blocks, over arrays
            straddle = (block <= domain) & (np.floor(domain / np.maximum(block, 1.0)) * block * racks < cluster.n_gpus)
            straddle &= topo.n > 1
            if np.any(straddle):
                half = np.maximum(np.ceil(topo.n / 2.0), topo.per_node)
                topo.per_domain = np.where(straddle, np.minimum(topo.per_domain, half), topo.per_domain)
                topo.domains = np.ceil(topo.n / topo.per_domain)
                topo.scale_up = topo.per_domain > topo.per_node
        return topo

    @property
    def crosses_network(self) -> np.ndarray:
        """The group spans NVLink domains, so part of its traffic goes over the NICs."""
        return self.domains > 1


def _bandwidths(cluster: Cluster) -> tuple[float, float]:
    hw = cluster.hardware
    intra = hw.intra_node.bandwidth_gb_per_s * 1e9 * hw.efficiency.intra_node_bandwidth
    inter = hw.inter_node.bandwidth_gb_per_s * 1e9 * hw.efficiency.inter_node_bandwidth
    return intra, inter


def _fast(topo: Topology, cluster: Cluster) -> tuple[np.ndarray, np.ndarray]:
    """Bus bandwidth (B/s) and per-hop latency (s) of the group's links inside its NVLink domain."""
    hw = cluster.hardware
    eff = hw.efficiency.intra_node_bandwidth
    up = hw.scale_up_link
    bw = np.where(topo.scale_up, up.bandwidth_gb_per_s, hw.intra_node.bandwidth_gb_per_s) * 1e9 * eff
    latency = np.where(topo.scale_up, up.latency_us, hw.intra_node.latency_us) * 1e-6
    return bw, latency


def _latency(topo: Topology, cluster: Cluster, ring_steps_per_rank: float) -> np.ndarray:
    hw = cluster.hardware
    _, hop = _fast(topo, cluster)
    intra_steps = ring_steps_per_rank * (topo.per_domain - 1.0)
    inter_steps = 2.0 * np.ceil(np.log2(np.maximum(topo.domains, 1.0)))
    latency = intra_steps * hop + inter_steps * hw.inter_node.latency_us * 1e-6
    return np.where(topo.n > 1, latency, 0.0)


def all_reduce_s(message_bytes: np.ndarray, topo: Topology, cluster: Cluster) -> np.ndarray:
    """Ring all-reduce of ``message_bytes`` on every rank of the group."""
    _, inter_bw = _bandwidths(cluster)
    intra_bw, _ = _fast(topo, cluster)
    intra = 2.0 * (topo.per_domain - 1.0) / topo.per_domain * message_bytes / intra_bw
    inter = 2.0 * (topo.domains - 1.0) / topo.domains * message_bytes / (topo.per_domain * inter_bw)
    return np.maximum(intra, inter) + _latency(topo, cluster, 2.0)


def _ring_latency(topo: Topology, cluster: Cluster) -> np.ndarray:
    """Latency of a ring all-gather / reduce-scatter: ``n - 1`` steps, ``nodes - 1`` of them across nodes.

    NCCL runs these two collectives as rings only (no tree; NCCL ``src/graph/tuning.cc``:
    ``nsteps = nRanks - 1``, ``nInterSteps = nNodes - 1``, latency = intra-node steps x NVLink
    latency + inter-node steps x network latency), so their latency grows linearly with the
    group -- what FSDP/ZeRO-3 at hundreds of ranks pays once per layer.
    """
    hw = cluster.hardware
    _, hop = _fast(topo, cluster)
    inter_steps = topo.domains - 1.0
    intra_steps = np.maximum(topo.n - 1.0 - inter_steps, 0.0)
    latency = intra_steps * hop + inter_steps * hw.inter_node.latency_us * 1e-6
    return np.where(topo.n > 1, latency, 0.0)


def all_gather_s(message_bytes: np.ndarray, topo: Topology, cluster: Cluster, nics: np.ndarray | float | None = None) -> np.ndarray:
    """All-gather (or reduce-scatter) whose *full* tensor is ``message_bytes``: half an all-reduce's bandwidth.

    ``nics``: how many of a node's NICs the collective's rings use at once (default: one per
    member in the node, NCCL's channels spread over all of them).  A collective of many tiny
    per-rank chunks runs on fewer channels (NCCL cuts the channel count until each channel has
    enough work), so its cross-node traffic leaves through fewer NICs; see ``SUBMODULE_GRANULAR``.
    """
    _, inter_bw = _bandwidths(cluster)
    intra_bw, _ = _fast(topo, cluster)
    lanes = topo.per_domain if nics is None else np.minimum(topo.per_domain, nics)
    intra = (topo.per_domain - 1.0) / topo.per_domain * message_bytes / intra_bw
    inter = (topo.domains - 1.0) / topo.domains * message_bytes / (lanes * inter_bw)
    return np.maximum(intra, inter) + _ring_latency(topo, cluster)


reduce_scatter_s = all_gather_s


def all_to_all_s(message_bytes: np.ndarray, topo: Topology, cluster: Cluster,
                 network_share: np.ndarray | float | None = None) -> np.ndarray:
    """All-to-all where every rank holds ``message_bytes`` and keeps 1/n of it.

    ``network_share``: the part of ``message_bytes`` that leaves the NVLink domain through this GPU's
    NIC; by default ``(n - per_domain)/n`` (every message to a rank of another domain crosses the
    network once).  A dispatcher that sends a token once per destination domain and forwards it
    inside (DeepEP; DeepSeek-V3 §3.2.2) passes a smaller share, and its NVLink side then also
    carries the forwarded copies.
    """
    _, inter_bw = _bandwidths(cluster)
    intra_bw, _ = _fast(topo, cluster)
    n = np.maximum(topo.n, 1.0)
    remote = (n - topo.per_domain) / n
    if network_share is None:
        intra = (topo.per_domain - 1.0) / n * message_bytes / intra_bw
        inter = remote * message_bytes / inter_bw
    else:
        # Own domain's copies, plus the arriving remote copies forwarded to their GPU (all but 1/per_domain).
        forwarded = remote * (topo.per_domain - 1.0) / topo.per_domain
        intra = ((topo.per_domain - 1.0) / n + forwarded) * message_bytes / intra_bw
        inter = np.asarray(network_share) * message_bytes / inter_bw
    return np.maximum(intra, inter) + _latency(topo, cluster, 1.0)


def point_to_point_s(message_bytes: np.ndarray, crosses: np.ndarray | Topology, cluster: Cluster) -> np.ndarray:
    """One send/recv between neighbouring ranks (pipeline stages, ring-attention neighbours).

    ``crosses``: True where the pair sits in different nodes of an HGX cluster (the network), or
    the pair's :class:`Topology` (a group of two ranks, or the ring), which also knows the scale-up
    link between the nodes of one NVLink domain.
    """
    hw = cluster.hardware
    intra_bw, inter_bw = _bandwidths(cluster)
    if isinstance(crosses, Topology):
        fast_bw, fast_latency = _fast(crosses, cluster)
        network = crosses.crosses_network
        bw = np.where(network, inter_bw, fast_bw)
        latency = np.where(network, hw.inter_node.latency_us * 1e-6, fast_latency)
        return message_bytes / bw + latency
    bw = np.where(crosses, inter_bw, intra_bw)
    latency = np.where(crosses, hw.inter_node.latency_us, hw.intra_node.latency_us) * 1e-6
    return message_bytes / bw + latency
