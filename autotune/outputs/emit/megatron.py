"""Megatron-LM (core_r0.19, megatron-core 0.19.2): the ``torchrun ... pretrain_gpt.py`` command line.

Flag names are those of ``megatron/training/arguments.py`` in that release; the
``frameworks`` tests parse the emitted argument list with that very parser.
Mapping of the plan:

* ``zero=0`` plain DDP; ``zero=1`` ``--use-distributed-optimizer``; ``zero=2`` and
  ``zero=3`` Megatron-FSDP (``--use-megatron-fsdp`` with the sharding strategy
  ``optim_grads`` or ``optim_grads_params``, which needs ``--ckpt-format fsdp_dtensor``).
* ``vp`` ``--num-virtual-stages-per-pipeline-rank``; a layer count that does not split
  evenly over ``pp*vp`` stages uses ``--decoder-first/last-pipeline-num-layers``.
* ``recompute=selective`` ``--recompute-granularity selective`` (core attention);
  ``full`` recomputes every layer (``uniform``, 1 layer per checkpoint).
* ``precision=fp8`` bf16 plus ``--fp8-format hybrid`` with the ``delayed`` recipe
  (``mxfp8`` on Blackwell); ``offload=cpu`` ``--optimizer-cpu-offload``.
"""

from __future__ import annotations

import numpy as np

from ...inputs.modelspec import ModelSpec
from ...training.plan import Plan, PlanBatch
from .base import EmitContext, Emitter, Launch, Limit, model_limit, node_script
from .shell import Group, Raw

RELEASE = "Megatron-LM core_r0.19 (megatron-core 0.19.2)"
SCRIPT = "megatron_pretrain_gpt.sh"
BLACKWELL_PREFIXES = ("b100", "b200", "b300", "gb200", "gb300")


def pipeline_split(n_layers: int, pp: int, vp: int) -> tuple[int, int] | None | bool:
    """Layers on the first and last pipeline ranks when they cannot be even.

    ``False``: the layers split evenly (no flags needed).  ``(first, last)``: every
    middle rank holds the same count and each count is a multiple of ``vp``, as
    Megatron requires.  ``None``: no such split exists.
    """
    if pp == 1 or n_layers % (pp * vp) == 0:
        return False
    best: tuple[int, int, int] | None = None  # (largest rank load, first, last)
    middle_ranks = pp - 2
    for middle in range(vp, n_layers + 1, vp):
        rest = n_layers - middle * middle_ranks
        if middle_ranks == 0:
            middle = 0
        if rest < 2 * vp:
            break
        for first in range(vp, rest - vp + 1, vp):
            last = rest - first
            if last % vp:
                continue
            load = max(first, last, middle)
            candidate = (load, first, last)
            # Prefer the smallest peak load, then the lighter first rank (it holds the embedding).
            if best is None or (candidate[0], candidate[1]) < (best[0], best[1]):
                best = candidate
        if middle_ranks == 0:
            break
    return None if best is None else (best[1], best[2])


def _uneven_unsplittable(plans: PlanBatch, model: ModelSpec) -> np.ndarray:
    out = np.zeros(len(plans), dtype=bool)
    pairs = np.stack([plans.pp, plans.vp], axis=1)
    for pp, vp in {tuple(int(x) for x in row) for row in pairs}:
        if pipeline_split(model.n_layers, pp, vp) is None:
            out |= (plans.pp == pp) & (plans.vp == vp)
    return out


LIMITS = (
    model_limit(
        "position_embedding",
        lambda model: model.position_embedding == "alibi",
        lambda plan, model: "model field position_embedding=alibi: Megatron-LM core has no ALiBi "
        "(its --position-embedding-type takes learned_absolute, rope, yarn, mrope, relative or none)",
    ),
    Limit(
        "pp",
        _uneven_unsplittable,
        lambda plan, model: f"plan fields pp={plan.pp}, vp={plan.vp}: {model.n_layers} layers cannot be split so that "
        f"the middle pipeline ranks hold equal layer counts and every count is a multiple of vp; "
        f"choose pp and vp that divide {model.n_layers}",
    ),
)


def fp8_recipe(hardware: str) -> str:
    return "mxfp8" if hardware.lower().startswith(BLACKWELL_PREFIXES) else "delayed"


def model_args(model: ModelSpec, seq_len: int) -> list[Group]:
    groups: list[Group] = [
        ("--num-layers", model.n_layers),
        ("--hidden-size", model.hidden_size),
        ("--ffn-hidden-size", model.ffn_hidden_size),
        ("--num-attention-heads", model.n_heads),
    ]
    if model.head_dim * model.n_heads != model.hidden_size:
        groups.append(("--kv-channels", model.head_dim))
    if model.n_kv_heads != model.n_heads:
        groups += [("--group-query-attention",), ("--num-query-groups", model.n_kv_heads)]
    groups.append(("--seq-length", seq_len))
    groups.append(("--max-position-embeddings", max(seq_len, model.max_seq_len or 0)))
    position = {"rope": "rope", "learned": "learned_absolute", "none": "none"}[model.position_embedding]
    groups.append(("--position-embedding-type", position))
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
        groups += [
            ("--moe-router-load-balancing-type", "aux_loss"),
            ("--moe-aux-loss-coeff", "0.01"),
            ("--moe-token-dispatcher-type", "alltoall"),
            ("--moe-grouped-gemm",),
        ]
    return groups


def parallel_args(plan: Plan, model: ModelSpec) -> list[Group]:
    groups: list[Group] = [
        ("--tensor-model-parallel-size", plan.tp),
        ("--pipeline-model-parallel-size", plan.pp),
    ]
    if plan.vp > 1:
        groups.append(("--num-virtual-stages-per-pipeline-rank", plan.vp))
    split = pipeline_split(model.n_layers, plan.pp, plan.vp)
    if split:
        groups += [("--decoder-first-pipeline-num-layers", split[0]), ("--decoder-last-pipeline-num-layers", split[1])]
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


def recompute_args(plan: Plan) -> list[Group]:
    if plan.recompute == "selective":
        return [("--recompute-granularity", "selective")]
    if plan.recompute == "full":
        return [("--recompute-granularity", "full"), ("--recompute-method", "uniform"), ("--recompute-num-layers", 1)]
    return []


def precision_args(plan: Plan, hardware: str) -> list[Group]:
    if plan.precision == "fp16":
        return [("--fp16",)]
    groups: list[Group] = [("--bf16",)]
    if plan.precision == "fp8":
        groups += [("--fp8-format", "hybrid"), ("--fp8-recipe", fp8_recipe(hardware))]
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


def launch(context: EmitContext) -> Launch:
    plan = context.plan
    exports: list[tuple[str, object]] = []
    if (plan.tp > 1 or plan.cp > 1) and not uses_fsdp(plan):
        # Megatron requires it with TP or CP before Blackwell, so that communication overlaps in issue order.
        exports.append(("CUDA_DEVICE_MAX_CONNECTIONS", 1))
    return Launch(
        program=(Raw('"${MEGATRON_LM_DIR}/pretrain_gpt.py"'),),
        arrays=(
            ("MODEL_ARGS", tuple(model_args(context.model, context.seq_len))),
            ("PARALLEL_ARGS", tuple(parallel_args(plan, context.model))),
            ("RECOMPUTE_ARGS", tuple(recompute_args(plan))),
            ("PRECISION_ARGS", tuple(precision_args(plan, context.hardware))),
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
        ),
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
