"""Per-plan quantities that step time and memory both need, computed once per batch of plans."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..costmodel.comm import Topology
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from .plan import CATEGORIES, PlanBatch

DUALPIPE = CATEGORIES["schedule"].index("dualpipe")


@dataclass(frozen=True)
class Geometry:
    """Shapes, counts and process-group placements of a batch of plans (arrays, one entry per plan).

    Ranks of a stage are ordered tp-cp-dp for attention and dense layers and etp-ep-edp for the
    routed experts (Megatron-Core's MoE parallel folding): the EP group's members are ``etp``
    ranks apart and may be TP, CP or DP ranks of attention.
    """

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    etp: np.ndarray
    vp: np.ndarray
    dp: np.ndarray
    mbs: np.ndarray
    sp: np.ndarray
    dualpipe: np.ndarray  # bool: DeepSeek's bidirectional schedule
    microbatches: np.ndarray  # per pipeline per step: global_batch / (dp * mbs)
    tokens: np.ndarray  # tokens of one micro-batch on one GPU: mbs * seq_len / cp
    layers_per_stage: np.ndarray  # of the fullest stage (ceil for uneven splits; MTP blocks count as layers)
    last_stage_layers: np.ndarray  # of the last stage: what the others leave (all of them with one stage)
    moe_fraction: float  # share of the stage's blocks that are MoE blocks (MTP blocks included)
    dense_params_per_layer: np.ndarray  # per GPU, after TP (attention, norms, dense MLP/shared expert, router)
    expert_params_per_layer: np.ndarray  # per GPU, after ETP and EP (routed experts)
    embedding_params: np.ndarray  # per GPU, on the first stage (and the last, see output_params)
    output_params: np.ndarray  # per GPU, on the last stage (with the MTP modules' projections)
    tp_group: Topology
    cp_group: Topology
    ep_group: Topology
    etp_group: Topology
    dp_group: Topology  # dense gradients: dp*cp ranks
    expert_dp_group: Topology  # expert gradients: tp*cp*dp/(etp*ep) ranks
    pp_pair: Topology  # two neighbouring stages
    pp_crosses_nodes: np.ndarray

    def last_layers(self, framework) -> np.ndarray:
        """Blocks on the last stage as the framework splits them: Megatron-style runtimes give the last
        rank what the others leave (--decoder-last-pipeline-num-layers, pipeline layouts); the 2024
        torch.distributed.pipelining runtime is charged the fullest stage's count, as validated."""
        if framework.pipeline_runtime == "torch":
            return self.layers_per_stage
        return self.last_stage_layers

    @property
    def dense_shard(self) -> np.ndarray:
        return self.dp_group.n

    @property
    def expert_shard(self) -> np.ndarray:
        return self.expert_dp_group.n


def stage_blocks(model: ModelSpec) -> float:
    """Transformer blocks a pipeline splits: the layers plus one per MTP module (Megatron-Core places
    the MTP block on the last stage as one more layer; Megatron-Bridge's FLOP formula counts L + mtp)."""
    return float(model.n_layers + model.mtp_layers)


def last_stage_blocks(blocks: float | np.ndarray, pp: np.ndarray) -> np.ndarray:
    """Blocks on the last pipeline rank: what ceil(blocks/pp) on each of the others leaves.  Where that would
    be less than nothing (80 layers over 32 ranks: 31 x 3 = 93), the ranks hold ceil or floor of blocks/pp,
    the fuller first, and the last floor(blocks/pp) -- the split the Megatron emitter writes
    (outputs/emit/megatron.pipeline_counts), so the last stage priced is the one launched."""
    pp = np.asarray(pp, dtype=np.float64)
    rest = blocks - (pp - 1.0) * np.ceil(blocks / pp)
    return np.where(rest >= 0.0, rest, np.floor(blocks / pp))


def moe_block_share(model: ModelSpec) -> float:
    """Share of the blocks (layers and MTP blocks) that are MoE blocks."""
    moe_blocks = model.n_moe_layers + (model.mtp_layers if model.mtp_block_is_moe else 0)
    return moe_blocks / stage_blocks(model)


def plan_geometry(model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch) -> Geometry:
    f64 = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    tp, pp, cp, ep, vp, mbs, etp = (f64(getattr(plans, k)) for k in ("tp", "pp", "cp", "ep", "vp", "mbs", "etp"))
    dp = f64(plans.dp)
    n = float(cluster.n_gpus)
    gpn = cluster.gpus_per_node
    moe_fraction = moe_block_share(model)
    blocks = stage_blocks(model)
    # Attention and norms of every block; the MTP blocks are full-attention blocks.
    attention = (model.attention_params_total + model.mtp_layers * model.attention_params_of_kind("full")) / blocks
    dense = attention + model.norm_params_per_layer
    dense_mlp = (1 - moe_fraction) * model.dense_mlp_params_per_layer + moe_fraction * model.shared_params_per_moe_layer
    embedding = model.embedding_params / tp
    # The last stage holds the output layer; a tied embedding still needs its own copy
    # there when the first and last stages differ (Megatron keeps both in sync).  Each MTP module adds
    # its projection of [h; embedding] (2h x h) and norms there; it shares the embedding and the head.
    h = model.hidden_size
    mtp_edge = model.mtp_layers * (2 * h * h + 3 * h) / tp
    output = np.where((pp > 1) | (not model.tied_embeddings), model.vocab_size * h / tp, 0.0) + mtp_edge
    stage = n / pp
    topo = lambda size, stride: Topology.of(cluster, size, stride)  # noqa: E731
    pp_pair = topo(np.full_like(tp, 2.0), stage)
    return Geometry(
        tp=tp, pp=pp, cp=cp, ep=ep, etp=etp, vp=vp, dp=dp, mbs=mbs, sp=np.asarray(plans.sp, dtype=bool),
        dualpipe=np.asarray(plans.schedule) == DUALPIPE,
        microbatches=workload.global_batch / (dp * mbs),
        tokens=mbs * workload.seq_len / cp,
        layers_per_stage=np.ceil(blocks / pp),
        last_stage_layers=last_stage_blocks(blocks, pp),
        moe_fraction=moe_fraction,
        dense_params_per_layer=(dense + dense_mlp) / tp,
        expert_params_per_layer=moe_fraction * model.expert_params_per_moe_layer / (etp * ep),
        embedding_params=embedding,
        output_params=output,
        tp_group=topo(tp, np.ones_like(tp)),
        cp_group=topo(cp, tp),
        ep_group=topo(ep, etp),
        etp_group=topo(etp, np.ones_like(tp)),
        dp_group=topo(dp * cp, tp),
        expert_dp_group=topo(stage / (etp * ep), etp * ep),
        pp_pair=pp_pair,
        pp_crosses_nodes=stage >= gpn,
    )
