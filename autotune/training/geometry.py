"""Per-plan quantities that step time and memory both need, computed once per batch of plans."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..costmodel.comm import Topology
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.workload import TrainWorkload
from .plan import PlanBatch


@dataclass(frozen=True)
class Geometry:
    """Shapes, counts and process-group placements of a batch of plans (arrays, one entry per plan)."""

    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vp: np.ndarray
    dp: np.ndarray
    mbs: np.ndarray
    sp: np.ndarray
    microbatches: np.ndarray  # per pipeline per step: global_batch / (dp * mbs)
    tokens: np.ndarray  # tokens of one micro-batch on one GPU: mbs * seq_len / cp
    layers_per_stage: np.ndarray  # of the fullest stage (ceil for uneven splits)
    moe_fraction: float  # share of layers that are MoE layers
    dense_params_per_layer: np.ndarray  # per GPU, after TP (attention, norms, dense MLP/shared expert)
    expert_params_per_layer: np.ndarray  # per GPU, after TP and EP (routed experts)
    embedding_params: np.ndarray  # per GPU, on the first stage (and the last, see output_params)
    output_params: np.ndarray  # per GPU, on the last stage
    tp_group: Topology
    cp_group: Topology
    ep_group: Topology
    dp_group: Topology  # dense gradients: dp*cp ranks
    expert_dp_group: Topology  # expert gradients: dp*cp/ep ranks
    pp_crosses_nodes: np.ndarray

    @property
    def dense_shard(self) -> np.ndarray:
        return self.dp_group.n

    @property
    def expert_shard(self) -> np.ndarray:
        return self.expert_dp_group.n


def plan_geometry(model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch) -> Geometry:
    f64 = lambda x: np.asarray(x, dtype=np.float64)  # noqa: E731
    tp, pp, cp, ep, vp, mbs = (f64(getattr(plans, k)) for k in ("tp", "pp", "cp", "ep", "vp", "mbs"))
    dp = f64(plans.dp)
    gpn = cluster.gpus_per_node
    moe_fraction = model.n_moe_layers / model.n_layers
    dense = model.attention_params_per_layer + model.norm_params_per_layer
    dense_mlp = (1 - moe_fraction) * model.dense_mlp_params_per_layer + moe_fraction * model.shared_params_per_moe_layer
    embedding = model.embedding_params / tp
    # The last stage holds the output layer; a tied embedding still needs its own copy
    # there when the first and last stages differ (Megatron keeps both in sync).
    output = np.where((pp > 1) | (not model.tied_embeddings), model.vocab_size * model.hidden_size / tp, 0.0)
    return Geometry(
        tp=tp, pp=pp, cp=cp, ep=ep, vp=vp, dp=dp, mbs=mbs, sp=np.asarray(plans.sp, dtype=bool),
        microbatches=workload.global_batch / (dp * mbs),
        tokens=mbs * workload.seq_len / cp,
        layers_per_stage=np.ceil(model.n_layers / pp),
        moe_fraction=moe_fraction,
        dense_params_per_layer=(dense + dense_mlp) / tp,
        expert_params_per_layer=moe_fraction * model.expert_params_per_moe_layer / (tp * ep),
        embedding_params=embedding,
        output_params=output,
        tp_group=Topology(tp, np.ones_like(tp), gpn),
        cp_group=Topology(cp, tp, gpn),
        ep_group=Topology(ep, tp, gpn),
        dp_group=Topology(dp * cp, tp, gpn),
        expert_dp_group=Topology(dp * cp / ep, tp * ep, gpn),
        pp_crosses_nodes=(cluster.n_gpus / pp) >= gpn,
    )
