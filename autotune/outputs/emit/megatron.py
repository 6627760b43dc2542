"""Megatron-LM (core_r0.19, megatron-core 0.19.2): the ``torchrun ... pretrain_gpt.py`` command line.

Flag names are those of ``megatron/training/arguments.py`` in that release; the
``frameworks`` tests parse the emitted argument list with that very parser.
Mapping of the plan:

* ``zero=0`` plain DDP; ``zero=1`` ``--use-distributed-optimizer``; ``zero=2`` and
  ``zero=3`` Megatron-FSDP (``--use-megatron-fsdp`` with the sharding strategy
  ``optim_grads`` or ``optim_grads_params``, which needs ``--ckpt-format fsdp_dtensor``).
* ``vp`` ``--num-virtual-stages-per-pipeline-rank``; a layer count that does not split
  evenly over ``pp*vp`` stages is split as the cost model priced it (ceil(L/pp) on every rank
  but the last): ``--decoder-first/last-pipeline-num-layers`` where they give that split, else
  ``--pipeline-model-parallel-layout``.
* The model as the spec states it: ``--rotary-base``, ``--use-rope-scaling`` (Llama 3.1),
  ``--qk-layernorm`` (Qwen3), and a DeepSeek-V3-style router (sigmoid scores, expert-bias balancing,
  top-k scaling); what is not set is said in the header (model_notes).
* ``recompute=selective`` ``--recompute-granularity selective`` (core attention);
  ``full`` recomputes every layer (``uniform``, 1 layer per checkpoint).
* ``precision=fp8`` bf16 plus ``--fp8-format hybrid`` with the ``delayed`` recipe
  (``mxfp8`` on compute capability 10.0 to 11.x); other mixtures of experts from 9.0 take DeepSeek's blockwise recipe
  (``--fp8-format e4m3 --fp8-recipe blockwise``: 1x128 activation tiles, 128x128 weight blocks);
  ``offload=cpu`` ``--optimizer-cpu-offload``.
* Mixtures of experts: ``--num-experts``, ``--moe-router-topk``, ``--moe-ffn-hidden-size``, the
  shared experts, dense first layers as ``--moe-layer-freq``, group-limited routing
  (``--moe-router-num-groups``/``--moe-router-group-topk``), ``--expert-model-parallel-size`` and
  ``--expert-tensor-parallel-size`` (etp, MoE parallel folding).  An EP group that leaves the NVLink
  domain uses the flex dispatcher (DeepEP on HGX, HybridEP on NVL72 racks), as the cost model prices
  it; the batch-level all-to-all overlap (``--overlap-moe-expert-parallel-comm``) is on wherever
  Megatron-Core runs it (pp == 1 or interleaved, no full recompute).  A workload that drops tokens
  (``--moe-capacity-factor C``) adds ``--moe-expert-capacity-factor C --moe-pad-expert-input-to-capacity``.
* Multi-head latent attention: ``--multi-latent-attention`` with its ranks and head widths;
  ``recompute=selective`` recomputes ``mla_up_proj layernorm`` (the cost model's meaning).
* Multi-token prediction: ``--mtp-num-layers``; with pp > 1 the stages are written as a
  ``--pipeline-model-parallel-layout`` that places the MTP block and the loss on the last rank with
  the layers the others leave, as the cost model splits them.
"""

from __future__ import annotations

import numpy as np

from ...inputs.hardware import Cluster, Hardware
from ...inputs.modelspec import ModelSpec
from ...training.plan import Plan, PlanBatch
from .base import EmitContext, Emitter, Launch, Limit, model_limit, node_script, offload_threads
from .shell import Group, Raw

RELEASE = "Megatron-LM core_r0.19 (megatron-core 0.19.2)"
SCRIPT = "megatron_pretrain_gpt.sh"


def pipeline_counts(blocks: int, pp: int) -> list[int]:
    """Blocks per pipeline rank as the cost model prices them (training.geometry): every rank but the last holds
    ceil(blocks/pp), the last the rest.  Where that would leave the last rank less than nothing (56 layers over 16
    ranks: 15 x 4 = 60), the ranks hold ceil or floor of blocks/pp, the fuller first: the same fullest rank."""
    per_rank = -(-blocks // pp)
    last = blocks - (pp - 1) * per_rank
    if last >= 0:
        return [per_rank] * (pp - 1) + [last]
    base, extra = divmod(blocks, pp)
    return [base + 1] * extra + [base] * (pp - extra)


def pipeline_split(n_layers: int, pp: int, vp: int) -> tuple[int, int] | None | bool:
    """Layers on the first and last pipeline ranks when they cannot be even.

    ``False``: the layers split evenly (no flags needed).  ``(first, last)``: Megatron's
    --decoder-first/last-pipeline-num-layers give the cost model's split (pipeline_counts: the middle
    ranks and the first hold ceil(L/pp), the last the rest; each count a multiple of ``vp``, as Megatron
    requires).  ``None``: they cannot (pipeline_layout then writes the split as a layout).  Any other split
    those flags allow would differ from the one estimated: 126 layers over pp 16, vp 3 put 21 layers on the
    first and last ranks, 2.6 times the 8 the cost model priced (their time and memory with them).
    """
    if pp == 1 or n_layers % (pp * vp) == 0:
        return False
    counts = pipeline_counts(n_layers, pp)
    if len(set(counts[:-1])) > 1 or counts[-1] < vp or any(c % vp for c in (counts[0], counts[-1])):
        return None
    return counts[0], counts[-1]


def pipeline_layout(model: ModelSpec, pp: int, vp: int) -> str | None:
    """``--pipeline-model-parallel-layout`` for a model with MTP blocks on pp > 1 stages, or for layers the first
    and last rank flags cannot split as the cost model does (pipeline_split is None); else None.

    As the cost model splits the blocks (training.geometry): every rank but the last holds
    ceil((L + mtp)/pp) blocks, the last the rest, its MTP block(s) and the loss in its last
    virtual stage (Megatron-Core: MTP in the last virtual stage, decoder layers before it).  Each
    rank's decoder layers spread over its vp virtual stages, earlier stages first (a stage may be
    empty: Megatron-Core's layout allows it).
    """
    if pp == 1:
        return None
    if not model.mtp_layers and pipeline_split(model.n_layers, pp, vp) is not None:
        return None  # even, or the first/last rank flags express the split
    counts = pipeline_counts(model.n_layers + model.mtp_layers, pp)
    if counts[-1] < model.mtp_layers:
        return None
    counts[-1] -= model.mtp_layers  # the last rank's decoder layers
    stages = [[""] * vp for _ in range(pp)]
    for rank, count in enumerate(counts):
        base, extra = divmod(count, vp)
        for chunk in range(vp):
            stages[rank][chunk] = "t" * (base + (1 if chunk < extra else 0))
    stages[0][0] = "E" + stages[0][0]
    stages[pp - 1][vp - 1] += "m" * model.mtp_layers + "L"
    return "|".join(stages[rank][chunk] for chunk in range(vp) for rank in range(pp))


def _uneven_unsplittable(plans: PlanBatch, model: ModelSpec) -> np.ndarray:
    out = np.zeros(len(plans), dtype=bool)
    pairs = np.stack([plans.pp, plans.vp], axis=1)
    for pp, vp in {tuple(int(x) for x in row) for row in pairs}:
        unsplittable = pp > 1 and pipeline_layout(model, pp, vp) is None and (
            bool(model.mtp_layers) or pipeline_split(model.n_layers, pp, vp) is None)
        if unsplittable:
            out |= (plans.pp == pp) & (plans.vp == vp)
    return out


LIMITS = (
    model_limit(
        "linear_attention",
        lambda model: model.linear_attention is not None,
        lambda plan, model: f"model field linear_attention: {model.name}'s "
        f"{sum(t == 'linear' for t in model.layer_types) or 'linear'} Gated DeltaNet layers have no Megatron-LM "
        "flag autotune writes, so the file would train full attention on every layer, another network than the one "
        "estimated",
    ),
    model_limit(
        "position_embedding",
        lambda model: model.position_embedding == "alibi",
        lambda plan, model: "model field position_embedding=alibi: Megatron-LM core has no ALiBi "
        "(its --position-embedding-type takes learned_absolute, rope, yarn, mrope, relative or none)",
    ),
    # Megatron-Core's MoELayer.forward raises "During training, performance may degrade if MoE and tensor
    # parallelism are enabled without also enabling sequence parallelism" on the first training step (a
    # ValueError, not a warning) whenever the attention TP group has more than one rank and
    # sequence_parallel is off: validate_args lets such a script through, the run dies at its first forward.
    Limit(
        "sp",
        lambda plans, model: np.full(len(plans), model.moe is not None) & (plans.tp > 1) & ~np.asarray(plans.sp, bool),
        lambda plan, model: f"plan fields tp={plan.tp}, sp=false: Megatron-Core's MoE layer refuses to train "
        f"{model.name}'s experts with tensor parallelism but no sequence parallelism (MoELayer.forward raises "
        "ValueError at the first step); use sp=true, or tp=1",
    ),
    Limit(
        "pp",
        _uneven_unsplittable,
        lambda plan, model: f"plan fields pp={plan.pp}, vp={plan.vp}: {model.n_layers} layers"
        f"{f' and {model.mtp_layers} MTP block(s)' if model.mtp_layers else ''} cannot be split as the cost model "
        f"splits them (ceil(layers/pp) on every rank but the last) without leaving the last rank short; "
        f"choose a pp that divides them more evenly",
    ),
)


def fp8_recipe(hardware: Hardware, model: ModelSpec | None = None) -> str:
    """The fp8 recipe TransformerEngine runs on the GPU (its check_recipe_support): MXFP8 blocks on compute
    capability 10.0 to 11.x where the tensor cores list them (TE refuses MXFP8 on 12.0, the RTX PRO 6000: TE
    issue #2668, Megatron-LM issue #4175); for mixtures of experts DeepSeek's blockwise recipe (1x128 / 128x128
    blocks, NVIDIA's DeepSeek-V3 recipes and DeepSeek-V3 section 3.3), which TE runs from 9.0; else delayed scaling,
    which TE runs on every fp8 GPU (8.9 and later).  A profile that does not state its compute capability (a
    custom one, or one embedded in a plans.json written before profiles stated it) gets delayed scaling: it
    launches everywhere, where a block-scaled recipe could be refused at start."""
    cc = hardware.compute_capability
    if cc is not None and 10.0 <= cc < 12.0 and hardware.supports("mxfp8"):
        return "mxfp8"
    if cc is not None and cc >= 9.0 and model is not None and model.moe:
        return "blockwise"
    return "delayed"


def model_args(model: ModelSpec, seq_len: int) -> list[Group]:
    groups: list[Group] = [
        ("--num-layers", model.n_layers),
        ("--hidden-size", model.hidden_size),
        ("--ffn-hidden-size", model.ffn_hidden_size),
        ("--num-attention-heads", model.n_heads),
    ]
    if model.mla is not None:
        mla = model.mla
        groups.append(("--multi-latent-attention",))
        if mla.q_lora_rank:
            groups.append(("--q-lora-rank", mla.q_lora_rank))
        groups += [
            ("--kv-lora-rank", mla.kv_lora_rank),
            ("--qk-head-dim", mla.qk_nope_head_dim),  # Megatron's qk-head-dim is the no-RoPE part
            ("--qk-pos-emb-head-dim", mla.qk_rope_head_dim),
            ("--v-head-dim", mla.v_head_dim),
        ]
    elif model.head_dim * model.n_heads != model.hidden_size:
        groups.append(("--kv-channels", model.head_dim))
    if model.n_kv_heads != model.n_heads:
        groups += [("--group-query-attention",), ("--num-query-groups", model.n_kv_heads)]
    groups.append(("--seq-length", seq_len))
    groups.append(("--max-position-embeddings", max(seq_len, model.max_seq_len or 0)))
    position = {"rope": "rope", "learned": "learned_absolute", "none": "none"}[model.position_embedding]
    groups.append(("--position-embedding-type", position))
    if model.position_embedding == "rope" and model.rope_theta is not None:
        # Megatron's default base is 10000: Llama 3's 500000 must be stated, or another model is trained.  Its
        # --rotary-base is an integer (a fractional base is rounded; model_notes says so)
        groups.append(("--rotary-base", round(model.rope_theta)))
    if model.position_embedding == "rope" and model.rope_scaling == "llama3":
        groups.append(("--use-rope-scaling",))  # Llama 3.1's frequency scaling (factor 8, Megatron's default)
    if model.qk_layernorm:
        groups.append(("--qk-layernorm",))  # Qwen3: an RMSNorm on each query and key head
    if model.rotary_percent is not None and model.mla is None and model.position_embedding == "rope":
        groups.append(("--rotary-percent", f"{model.rotary_percent:g}"))  # MiniMax-M2: RoPE on 64 of 128 dims
    if model.attention_bias != "none":
        # Qwen2's q/k/v biases; with q/k/v/o (attention_bias: true) the output projection's is said in model_notes:
        # Megatron's --add-bias-linear would also bias every MLP projection
        groups.append(("--add-qkv-bias",))
    if model.mlp == "swiglu":
        groups += [("--swiglu",), ("--disable-bias-linear",)]
    if not model.tied_embeddings:
        groups.append(("--untie-embeddings-and-output-weights",))
    groups.append(("--normalization", "RMSNorm" if model.norm == "rmsnorm" else "LayerNorm"))
    if not model.dropout:
        groups += [("--attention-dropout", "0.0"), ("--hidden-dropout", "0.0")]
    if model.moe:
        moe = model.moe
        groups += [
            ("--num-experts", moe.n_experts),
            ("--moe-router-topk", moe.top_k),
            ("--moe-ffn-hidden-size", moe.expert_ffn_hidden_size),
        ]
        if moe.first_dense_layers or moe.layer_interval != 1:
            pattern = [0] * model.n_layers
            for layer in range(moe.first_dense_layers, model.n_layers, moe.layer_interval):
                pattern[layer] = 1
            groups.append(("--moe-layer-freq", "[" + ",".join(map(str, pattern)) + "]"))
        if moe.n_shared_experts:
            groups.append(("--moe-shared-expert-intermediate-size", moe.shared_expert_ffn_hidden_size))
        if moe.routing_groups > 1:  # group-limited routing (DeepSeek-V3's node-limited routing)
            groups += [("--moe-router-num-groups", moe.routing_groups),
                       ("--moe-router-group-topk", moe.routing_group_topk)]
        if moe.router_score != "softmax":
            groups.append(("--moe-router-score-function", moe.router_score))
        if moe.router_expert_bias:
            # DeepSeek-V3's auxiliary-loss-free balancing (§2.1.2): a per-expert bias updated at gamma = 0.001, and a
            # sequence-wise balance loss of alpha = 0.0001 beside it
            groups += [("--moe-router-enable-expert-bias",), ("--moe-router-bias-update-rate", "1e-3"),
                       ("--moe-router-load-balancing-type", "seq_aux_loss"), ("--moe-aux-loss-coeff", "1e-4")]
        else:  # Megatron's customary weight; a config's own (another convention) is said in the header (model_notes)
            groups += [("--moe-router-load-balancing-type", "aux_loss"), ("--moe-aux-loss-coeff", "0.01")]
        if moe.router_topk_scaling is not None:
            groups.append(("--moe-router-topk-scaling-factor", moe.router_topk_scaling))
        groups.append(("--moe-grouped-gemm",))
    if model.mtp_layers:
        groups.append(("--mtp-num-layers", model.mtp_layers))
    return groups


def expert_group_leaves_domain(context: EmitContext) -> bool:
    """Whether the plan's EP group spans NVLink domains (its all-to-all crosses the network)."""
    plan = context.plan
    if plan.ep == 1:
        return False
    hardware = context.hardware_spec
    cluster = Cluster(hardware, plan.n_gpus, min(context.gpus_per_node, plan.n_gpus))
    return cluster.link_tier(plan.ep, plan.etp) == "inter_node"


def moe_runtime_args(context: EmitContext) -> list[Group]:
    """Dispatcher and all-to-all overlap, as the cost model prices them for Megatron-Core 0.19."""
    plan, model = context.plan, context.model
    if not model.moe:
        return []
    groups: list[Group] = []
    if expert_group_leaves_domain(context) and context.moe_capacity_factor is None:
        # A token crosses the network once per destination node and NVLink forwards it (DeepEP; HybridEP
        # on NVL72 racks, whose NVLink domain spans the trays): the framework's ep_dispatch "dedup".
        domain_wide = context.hardware_spec.gpus_per_scale_up_domain > context.gpus_per_node
        groups += [("--moe-token-dispatcher-type", "flex"),
                   ("--moe-flex-dispatcher-backend", "hybridep" if domain_wide else "deepep")]
    else:
        groups.append(("--moe-token-dispatcher-type", "alltoall"))
    if context.moe_capacity_factor is not None:
        # Token dropping with padding: fixed shapes, so the dispatcher needs no host sync (the cost model's
        # workload.moe_host_sync); on the alltoall dispatcher, as the flex one refuses padding to capacity
        # (Megatron-Core TransformerConfig) and the cost model prices it so.
        groups += [("--moe-expert-capacity-factor", repr(float(context.moe_capacity_factor))),
                   ("--moe-pad-expert-input-to-capacity",)]
    # Megatron-Core's batch-level EP overlap (TransformerConfig: pp == 1 or interleaved, no full
    # recompute, at most one MTP layer); the cost model hides the framework's share only then.
    # (--delay-wgrad-compute, which NVIDIA's recipes add, needs TransformerEngine >= 2.8 with
    # --overlap-grad-reduce; add it where your TE has it.)
    if plan.ep > 1 and (plan.pp == 1 or plan.vp > 1) and plan.recompute != "full" and model.mtp_layers <= 1:
        groups.append(("--overlap-moe-expert-parallel-comm",))
    return groups


def parallel_args(plan: Plan, model: ModelSpec) -> list[Group]:
    groups: list[Group] = [
        ("--tensor-model-parallel-size", plan.tp),
        ("--pipeline-model-parallel-size", plan.pp),
    ]
    layout = pipeline_layout(model, plan.pp, plan.vp)
    if layout is not None:
        groups.append(("--pipeline-model-parallel-layout", layout))  # sets the virtual stages too
    else:
        if plan.vp > 1:
            groups.append(("--num-virtual-stages-per-pipeline-rank", plan.vp))
        split = pipeline_split(model.n_layers, plan.pp, plan.vp)
        if split:
            groups += [("--decoder-first-pipeline-num-layers", split[0]),
                       ("--decoder-last-pipeline-num-layers", split[1])]
    groups.append(("--context-parallel-size", plan.cp))
    if model.moe:
        groups += [("--expert-model-parallel-size", plan.ep), ("--expert-tensor-parallel-size", plan.etp)]
    if plan.sp:
        # TP communication overlapped with GEMMs (Transformer Engine userbuffers): the cost model's
        # H100 tp_overlap was fitted on runs that used it, so the launch config turns it on too.
        groups += [("--sequence-parallel",), ("--tp-comm-overlap",)]
    if plan.zero == 1:
        groups += [("--use-distributed-optimizer",), ("--overlap-grad-reduce",), ("--overlap-param-gather",)]
    elif plan.zero >= 2:
        strategy = "optim_grads" if plan.zero == 2 else "optim_grads_params"
        groups += [
            ("--use-megatron-fsdp",),
            ("--data-parallel-sharding-strategy", strategy),
            ("--ckpt-format", "fsdp_dtensor"),
            ("--overlap-grad-reduce",),
            ("--overlap-param-gather",),
        ]
    else:
        groups.append(("--overlap-grad-reduce",))
    if plan.offload == "cpu":
        groups += [("--optimizer-cpu-offload",), ("--optimizer-offload-fraction", "1.0"),
                   ("--use-precision-aware-optimizer",)]
    return groups


def recompute_args(plan: Plan, model: ModelSpec | None = None) -> list[Group]:
    if plan.recompute == "selective":
        if model is not None and model.mla is not None:
            # The MLA up-projections and the norms (DeepSeek-V3 §3.2.3), as the cost model prices it.
            return [("--recompute-granularity", "selective"), ("--recompute-modules", "mla_up_proj", "layernorm")]
        return [("--recompute-granularity", "selective")]
    if plan.recompute == "full":
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    return []


def offload_forces_delayed(plan: Plan, hardware: Hardware, model: ModelSpec | None = None) -> bool:
    """Whether the plan runs delayed scaling where the GPU would take a block-scaled recipe: Megatron-LM's
    validate_args accepts --optimizer-cpu-offload with --fp8-param-gather (which the distributed optimizer's fp8
    plans pass, as the estimate counts) only under --fp8-recipe delayed ("When `--fp8-param-gather` is enabled, the
    optimizer cpu offload must be used in conjunction with `--fp8-recipe delayed`")."""
    return (plan.precision == "fp8" and plan.zero == 1 and plan.offload == "cpu"
            and fp8_recipe(hardware, model) != "delayed")


def precision_args(plan: Plan, hardware: Hardware, model: ModelSpec | None = None) -> list[Group]:
    if plan.precision == "fp16":
        return [("--fp16",)]
    groups: list[Group] = [("--bf16",)]
    if plan.precision == "fp8":
        recipe = "delayed" if offload_forces_delayed(plan, hardware, model) else fp8_recipe(hardware, model)
        # DeepSeek's blockwise recipe is e4m3 throughout (forward and backward; DeepSeek-V3 §3.3.2).
        groups += [("--fp8-format", "e4m3" if recipe == "blockwise" else "hybrid"), ("--fp8-recipe", recipe)]
        if plan.zero == 1:
            # parameters in fp8 under the distributed optimizer (Megatron refuses the flag without it): TE's fp8 copies
            # replace the bf16 weights rather than sit beside them, as the estimate counts (framework fp8_param_gather)
            groups.append(("--fp8-param-gather",))
    elif plan.precision == "fp4":
        # NVFP4 training (TransformerEngine's NVFP4BlockScaling; Megatron-Core 0.14 and later): the linear layers'
        # GEMMs in NVFP4, the parameters kept in bf16 (no --fp4-param-gather), as the estimate counts
        groups += [("--fp4-format", "e2m1"), ("--fp4-recipe", "nvfp4")]
    return groups


def batch_args(context: EmitContext) -> list[Group]:
    return [("--micro-batch-size", context.plan.mbs), ("--global-batch-size", context.global_batch)]


def data_args(context: EmitContext) -> list[Group]:
    model = context.model
    if context.data_path is None:
        groups: list[Group] = [("--mock-data",)]
    else:
        groups = [("--data-path", context.data_path), ("--split", "99,1,0")]
    if context.tokenizer is None:
        groups += [("--tokenizer-type", "NullTokenizer"), ("--vocab-size", model.vocab_size)]
    else:
        groups += [("--tokenizer-type", "HuggingFaceTokenizer"), ("--tokenizer-model", context.tokenizer)]
    return groups


def training_args(context: EmitContext) -> list[Group]:
    """Run length and optimizer: placeholders that make the command complete; set your own."""
    steps = context.train_steps or 1000
    return [
        ("--train-iters", steps),
        ("--lr", "1.0e-4"),
        ("--min-lr", "1.0e-5"),
        ("--lr-decay-style", "cosine"),
        ("--lr-warmup-fraction", "0.01"),
        ("--weight-decay", "0.1"),
        ("--clip-grad", "1.0"),
        ("--adam-beta1", "0.9"),
        ("--adam-beta2", "0.95"),
        ("--init-method-std", "0.02"),
        ("--log-interval", 1),
        ("--eval-iters", 0),
    ]


def uses_fsdp(plan: Plan) -> bool:
    return plan.zero >= 2


def _attention_notes(model: ModelSpec) -> list[str]:
    """The attention this file does not build, though the estimate priced it: the file trains dense causal
    attention on every layer (Megatron's defaults), which the header must say."""
    notes = []
    sliding = sum(t == "sliding" for t in model.layer_types)
    if model.sliding_window and sliding:
        notes.append(f"{model.name}: {sliding} of its {model.n_layers} layers attend to a {model.sliding_window}-token "
                     "window, which the estimate prices; this file sets no window (Megatron: --window-size, "
                     "--window-attn-skip-freq), so it trains full attention on every layer, a slower network than the "
                     "estimate.")
    if model.attention_sinks:
        notes.append(f"{model.name}'s attention sinks (a learned softmax logit per head) are not set here.")
    if model.dsa is not None:
        notes.append(f"{model.name}'s sparse attention (an indexer keeps {model.dsa.index_topk} keys per query), which "
                     "the estimate prices, is not set here: this file trains dense multi-latent attention.")
    if model.qk_norm_per_layer:
        notes.append(f"{model.name} normalises queries and keys over all heads of a layer together (its config.json's "
                     "qk_norm_type per_layer), which this file does not set: Megatron's --qk-layernorm normalises "
                     "each head.")
    if model.attention_output_gate:
        notes.append(f"{model.name}'s gate on the attention output is not set here.")
    return notes


def model_notes(model: ModelSpec) -> tuple[str, ...]:
    """What of the model the launch file does not set, said where the user reads it: attention it does not build
    (windows, sinks, sparse attention), a RoPE base the spec does not state (Megatron's default, 10000, is used)
    and a RoPE scaling other than Llama 3.1's."""
    notes = _attention_notes(model)
    coeff = model.moe.router_aux_loss_coeff if model.moe is not None else None
    if coeff is not None and not model.moe.router_expert_bias and coeff != 0.01:
        # Hugging Face's router_aux_loss_coef weighs one loss over all layers' tokens (load_balancing_loss_func),
        # Megatron's --moe-aux-loss-coeff each layer's: not the same number, and a config may carry a library
        # default rather than the training recipe's (transformers' gpt-oss config: 0.9)
        notes.append(f"{model.name}'s config.json states router_aux_loss_coef {coeff:g} (Hugging Face's weight of one "
                     "loss over all layers); --moe-aux-loss-coeff 0.01 is Megatron's per-layer weight: set it to "
                     "your recipe's.")
    if model.attention_bias == "all":
        notes.append(f"{model.name}'s attention output projection has a bias too (its config.json's attention_bias), "
                     "which this file does not add: --add-qkv-bias biases q, k and v only, and --add-bias-linear "
                     "would bias every linear layer, the MLP's included.")
    if model.position_embedding != "rope":
        return tuple(notes)
    if model.rope_theta is None:
        notes.append(f"{model.name}'s spec states no rope_theta: Megatron's rotary base, 10000, is used; add "
                     "--rotary-base from the model's config.json if it differs.")
    elif not float(model.rope_theta).is_integer():
        notes.append(f"{model.name}'s rope_theta {model.rope_theta:g} is passed as --rotary-base "
                     f"{round(model.rope_theta)} (Megatron reads an integer).")
    if model.rope_scaling == "llama3":
        notes.append("--use-rope-scaling applies Llama 3.1's scaling with Megatron's factor 8; add "
                     "--rope-scaling-factor if the model's config.json gives another (Llama 3.2: 32).")
    elif model.rope_scaling == "yarn" and model.mla is not None:
        notes.append(f"{model.name} scales RoPE with yarn (its config.json's rope_scaling): Megatron's multi-latent "
                     "attention uses yarn, but its factors (--rotary-scaling-factor and the yarn betas and mscale) "
                     "are not set here; take them from that config to train at its context length.")
    elif model.rope_scaling is not None:
        notes.append(f"{model.name} scales RoPE with {model.rope_scaling} (its config.json's rope_scaling), which "
                     f"this file does not set{' (Megatron: --position-embedding-type yarn and its factors)' if model.rope_scaling == 'yarn' else ''}; "
                     "take it from that config to train at its context length.")
    return tuple(notes)


def launch(context: EmitContext) -> Launch:
    plan = context.plan
    exports: list[tuple[str, object]] = []
    if (plan.tp > 1 or plan.cp > 1) and not uses_fsdp(plan):
        # Megatron requires it with TP or CP before Blackwell, so that communication overlaps in issue order.
        exports.append(("CUDA_DEVICE_MAX_CONNECTIONS", 1))
    exports += offload_threads(context)
    return Launch(
        program=(Raw('"${MEGATRON_LM_DIR}/pretrain_gpt.py"'),),
        arrays=(
            ("MODEL_ARGS", tuple(model_args(context.model, context.seq_len))),
            ("PARALLEL_ARGS", tuple(parallel_args(plan, context.model) + moe_runtime_args(context))),
            ("RECOMPUTE_ARGS", tuple(recompute_args(plan, context.model))),
            ("PRECISION_ARGS", tuple(precision_args(plan, context.hardware_spec, context.model))),
            ("BATCH_ARGS", tuple(batch_args(context))),
            ("DATA_ARGS", tuple(data_args(context))),
            ("TRAINING_ARGS", tuple(training_args(context))),
        ),
        settings=(("MEGATRON_LM_DIR", "Megatron-LM",
                   "A checkout of Megatron-LM at core_r0.19 (it holds pretrain_gpt.py)."),),
        exports=tuple(exports),
        notes=(
            "TRAINING_ARGS are placeholders (run length, learning rate, logging): set your own.",
            "Without --data-path, Megatron trains on mock data with a NullTokenizer of the model's vocabulary.",
        ) + model_notes(context.model) + ((f"fp8 recipe: delayed scaling, because the hardware profile ({context.hardware_spec.name}) states no "
              "compute_capability; add it to the profile for MXFP8 (10.x) or the blockwise MoE recipe (9.0 and later).",)
             if plan.precision == "fp8" and context.hardware_spec.compute_capability is None else ())
        + ((f"fp8 recipe: delayed scaling rather than {fp8_recipe(context.hardware_spec, context.model)}, because "
            "Megatron-LM accepts --optimizer-cpu-offload with --fp8-param-gather only under delayed scaling; "
            "use offload=none for the block-scaled recipe.",)
           if offload_forces_delayed(plan, context.hardware_spec, context.model) else ()),
    )


def render(context: EmitContext) -> dict[str, str]:
    return {SCRIPT: node_script(EMITTER, context, launch(context))}


EMITTER = Emitter(
    name="megatron",
    release=RELEASE,
    summary="torchrun command line for Megatron-LM's pretrain_gpt.py",
    limits=LIMITS,
    render_files=render,
    launch=launch,
)
