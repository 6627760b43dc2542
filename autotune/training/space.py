"""The search space: axes and their choices, and the validity rules every plan must pass.

Validity rules say whether a plan can run at all (the product of the degrees
equals the GPU count, heads divide by tp, ...).  They are explicit, tested, and
each has a reason that ``autotune search`` counts.  Whether a valid plan *fits*
in memory is the cost model's business, not a rule.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Callable, Mapping

import numpy as np

from ..errors import InputError, check_keys
from ..inputs import loading
from ..inputs.framework import Framework, load_framework
from ..inputs.hardware import Cluster, Hardware
from ..inputs.modelspec import ModelSpec
from ..inputs.resources import bundled_dir
from ..inputs.workload import TrainWorkload
from .geometry import last_stage_blocks
from .plan import CATEGORIES, EMBEDDING_AND_LOSS_STAGES, ETP_AS_TP, PLAN_KEYS, Plan, PlanBatch, parse_plan_fields

# Reason codes, in the order rules are checked; 0 means valid.
REASONS: tuple[str, ...] = (
    "valid",
    "tp*pp*cp does not divide the GPU count",
    "heads not divisible by tp",
    "KV heads not divisible by tp (KV heads are not replicated in training)",
    "tp spans more than one node",
    "pipeline stages exceed layers",
    "layers not divisible by pp*vp",
    "vp > 1 without pipeline parallelism",
    "sequence parallelism without tp > 1",
    "sequence not divisible by 2*cp (load-balanced causal ring attention)",
    "experts not divisible by ep",
    "etp*ep does not divide the ranks of a pipeline stage (tp*cp*dp)",
    "ep > 1 on a dense model",
    "global batch not divisible by dp*micro-batch",
    "precision not supported by the GPU",
    "optimizer offload needs zero >= 1",
    "sp=false with tp > 1 (space rule sp_with_tp)",
    "parallelism the framework does not offer",
    "ZeRO stage the framework does not offer (with this pipeline or expert parallelism)",
    "selective recompute the framework does not offer",
    "interleaved schedule the framework does not offer for this pp",
    "interleaved schedule needs the micro-batches to be a multiple of pp",
    "fp8 the framework does not offer",
    "etp differs from tp on a dense model",
    "expert FFN width not divisible by etp",
    "etp spans more than one node",
    "expert tensor parallelism the framework does not offer",
    "dualpipe schedule the framework does not offer",
    "dualpipe needs an even pp > 1, vp = 1 and an even number of micro-batches >= 2*pp",
    "MTP modules do not fit on the last pipeline stage (the stages before it hold ceil(blocks/pp) each)",
    "optimizer offload the framework does not offer",
    "sequence not divisible by cp*tp under sequence parallelism",
    "mixture of experts with tp > 1 but no sequence parallelism, which the framework refuses",
    "fp4 the framework does not offer",
    "not expressible in the --emit format(s)",
)
NOT_EXPRESSIBLE = len(REASONS) - 1
VALID = 0
# The framework's rules (codes into REASONS).
FW_PARALLELISM = REASONS.index("parallelism the framework does not offer")
FW_ZERO = REASONS.index("ZeRO stage the framework does not offer (with this pipeline or expert parallelism)")
FW_SELECTIVE = REASONS.index("selective recompute the framework does not offer")
FW_INTERLEAVED = REASONS.index("interleaved schedule the framework does not offer for this pp")
FW_INTERLEAVE_MICROBATCHES = REASONS.index("interleaved schedule needs the micro-batches to be a multiple of pp")
FW_FP8 = REASONS.index("fp8 the framework does not offer")
FW_FP4 = REASONS.index("fp4 the framework does not offer")
ETP_DENSE = REASONS.index("etp differs from tp on a dense model")
ETP_FFN = REASONS.index("expert FFN width not divisible by etp")
ETP_NODE = REASONS.index("etp spans more than one node")
FW_ETP = REASONS.index("expert tensor parallelism the framework does not offer")
FW_DUALPIPE = REASONS.index("dualpipe schedule the framework does not offer")
DUALPIPE_SHAPE = REASONS.index("dualpipe needs an even pp > 1, vp = 1 and an even number of micro-batches >= 2*pp")
FW_OFFLOAD = REASONS.index("optimizer offload the framework does not offer")
SP_SEQUENCE = REASONS.index("sequence not divisible by cp*tp under sequence parallelism")
FW_MOE_SP = REASONS.index("mixture of experts with tp > 1 but no sequence parallelism, which the framework refuses")
MTP_STAGE = REASONS.index("MTP modules do not fit on the last pipeline stage (the stages before it hold "
                          "ceil(blocks/pp) each)")
# Axes a space file may leave out (added after the format was fixed): their value when it does --
# etp equal to tp and the 1F1B schedule, so an older space searches what it searched before.
OPTIONAL_AXES: Mapping[str, tuple] = {"etp": (ETP_AS_TP,), "schedule": ("1f1b",)}


@dataclass(frozen=True)
class Rules:
    tp_within_node: bool = True
    uneven_pipeline: bool = True
    sp_with_tp: bool = True


PERMISSIVE_RULES = Rules(tp_within_node=False, uneven_pipeline=True, sp_with_tp=False)


@dataclass(frozen=True)
class Space:
    """Axes (each a tuple of choices, or ``"auto"``) and rules."""

    name: str
    axes: Mapping[str, Any]
    rules: Rules = field(default_factory=Rules)
    source: str = ""

    def with_precisions(self, precisions: tuple[str, ...]) -> "Space":
        """The space searching exactly these GEMM precisions (``search --precision``)."""
        return replace(self, axes={**self.axes, "precision": tuple(precisions)})

    def fixed(self, fixes: Mapping[str, Any]) -> "Space":
        """The space narrowed to single values (``--fix tp=8``)."""
        axes = dict(self.axes)
        for key, value in fixes.items():
            axes[key] = (value,)
        return replace(self, axes=axes)


_RULE_KEYS = frozenset(f for f in Rules.__dataclass_fields__)


def space_from_mapping(data: dict, *, source: str) -> Space:
    axes_given = data.get("axes") if isinstance(data.get("axes"), dict) else {}
    if {"weights", "kv", "max_batch"} & set(axes_given):  # a serving space (serve.yaml)
        raise InputError("must be a training search space (axes tp, pp, zero, mbs, recompute, ...; rules), but got a "
                         "serving one (axes weights, kv, max_batch); give a training space such as "
                         "search_spaces/train.yaml", source=source)
    check_keys(data, frozenset({"name", "axes", "rules", "description"}), source=source)
    axes_raw = data.get("axes")
    if not isinstance(axes_raw, dict):
        raise InputError("must map each plan key to a list of choices (or auto)", source=source, field="axes")
    check_keys(axes_raw, frozenset(PLAN_KEYS), source=source, section="axes")
    axes: dict[str, Any] = {}
    for key in PLAN_KEYS:
        raw = axes_raw.get(key)
        if raw is None and key in OPTIONAL_AXES:
            axes[key] = OPTIONAL_AXES[key]
            continue
        if raw is None:
            raise InputError(f"is missing; give a list of choices, e.g. {key}: [1, 2]", source=source, field=f"axes.{key}")
        if raw == "auto":
            if key not in ("pp", "ep", "etp"):
                raise InputError("only pp, ep and etp accept auto", source=source, field=f"axes.{key}")
            axes[key] = "auto"
            continue
        if not isinstance(raw, list) or not raw:
            raise InputError(f"must be a non-empty list, but got {loading.as_written(raw)}", source=source,
                             field=f"axes.{key}")
        try:
            values = [_choice(key, v) for v in raw]
        except ValueError as exc:
            raise InputError(str(exc), source=source, field=f"axes.{key}") from None
        axes[key] = loading.distinct_choices(values, raw, source=source, field=f"axes.{key}")
    rules_raw = data.get("rules")
    rules_raw = {} if rules_raw is None else rules_raw
    if not isinstance(rules_raw, dict):
        raise InputError("must be a mapping of rule names to true/false", source=source, field="rules")
    check_keys(rules_raw, _RULE_KEYS, source=source, section="rules")
    rules = Rules(**{k: loading.boolean(rules_raw, k, source=source, section="rules") for k in rules_raw})
    return Space(name=loading.text(data, "name", source=source, default=Path(source).stem), axes=axes, rules=rules,
                 source=source)


def _choice(key: str, value: Any) -> Any:
    """One choice of axis ``key``, read as ``--fix key=value`` reads it; a choice holding ',' or '=' (``8,pp=2``)
    would be read as other keys, so it is refused."""
    text = loading.as_written(value) if value is None or isinstance(value, (bool, float)) else str(value)
    if "," in text or "=" in text:
        raise ValueError(f"each choice is one value, but got {loading.as_written(value)}; give each choice as its own "
                         "item of the list")
    return parse_plan_fields(f"{key}={text}")[key]


def load_space(path: str | None) -> Space:
    if path is None:
        default = bundled_dir("search_spaces") / "train.yaml"
        return space_from_mapping(loading.read_mapping(default), source="search_spaces/train.yaml")
    if not path.strip():  # as a path it is the working folder
        raise InputError(f"must not be empty: give a search-space YAML, or leave --space out for the bundled "
                         f"train.yaml, but got {path!r}", field="--space")
    return space_from_mapping(loading.read_mapping(Path(path)), source=path)


def axis_choices(space: Space, model: ModelSpec, cluster: Cluster, workload: TrainWorkload,
                 framework: Framework | None = None) -> dict[str, tuple]:
    """Concrete choices per axis for this model and cluster.

    Choices that can never be valid on their own (fp8 on a GPU without it, ep > 1
    on a dense model, tp beyond a node -- an NVLink domain, which on NVL72 racks spans
    several nodes -- expert TP or DualPipe where the model or framework cannot use them)
    are dropped here, so the Optuna categoricals are the same in every trial of a study.
    ``etp: auto`` is ``tp`` (Megatron's default) and 1 (experts not split, EP folded over the TP
    ranks: the layouts of NVIDIA's MoE recipes) on an MoE model whose framework sets expert TP apart
    (``Framework.expert_tp``); 1 where its experts are never split; ``tp`` otherwise.  Other
    values can be listed in a space file.  ``pp: auto`` is every
    feasible stage count: each divisor of the GPU count up to the layer count (stages
    need not divide the layers where the framework splits them unevenly, e.g. BLOOM's
    70 layers on 12 stages; the validity rules decide per framework).
    """
    n = cluster.n_gpus
    framework = framework if framework is not None else load_framework()
    choices: dict[str, tuple] = {}
    for key in PLAN_KEYS:
        axis = space.axes[key]
        if axis == "auto" and key == "pp":
            values = [d for d in range(1, min(model.n_layers, n) + 1) if n % d == 0]
        elif axis == "auto" and key == "ep":
            experts = model.moe.n_experts if model.moe else 1
            values = [d for d in range(1, experts + 1) if experts % d == 0 and d <= n]
        elif axis == "auto" and key == "etp":
            values = [ETP_AS_TP]
            if model.moe and framework.expert_tp == "independent":
                values.append(1)  # experts not split: the folding layouts MoE recipes run (EP over the TP ranks)
            elif model.moe and framework.expert_tp == "none":
                values = [1]
        else:
            values = list(axis)
        if key == "precision":
            supported = [v for v in values if cluster.hardware.supports(v)]
            values = supported or values  # all unsupported: keep, so the rejection names the reason
        if key == "ep" and not model.moe:
            values = [v for v in values if v == 1] or values
        if key == "etp" and not model.moe:
            # as for ep: a dense model's etp is tp; a pinned other value stays, so the rejection names it
            values = [v for v in values if v == ETP_AS_TP] or values
        if key == "schedule" and "dualpipe" not in framework.pipeline_schedules:
            values = [v for v in values if v != "dualpipe"] or values
        if key in ("tp", "etp") and space.rules.tp_within_node:
            values = [v for v in values if v == ETP_AS_TP or v <= cluster.gpus_per_scale_up_domain] or values
        choices[key] = tuple(values)
    return choices


def _checks(model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, rules: Rules,
            layout_only: bool, framework: Framework) -> dict[int, np.ndarray]:
    n = cluster.n_gpus
    fw = framework
    tp, pp, cp, ep, vp, etp = plans.tp, plans.pp, plans.cp, plans.ep, plans.vp, plans.etp
    none = np.zeros(len(tp), dtype=bool)
    model_parallel = tp * pp * cp
    dp = np.where(n % model_parallel == 0, n // model_parallel, 0)
    stage_ranks = np.where(n % pp == 0, n // np.maximum(pp, 1), 0)
    dualpipe = plans.schedule == CATEGORIES["schedule"].index("dualpipe")
    domain = cluster.gpus_per_scale_up_domain
    experts = model.moe.n_experts if model.moe else 1
    dims = set(fw.parallel_dims)
    uneven_ok = rules.uneven_pipeline and fw.uneven_stages
    interleaved = (vp > 1) & (pp > 1)  # vp > 1 without pp is rule 7
    checks = {
        1: n % model_parallel != 0,
        2: model.n_heads % tp != 0,
        3: model.n_kv_heads % tp != 0,
        4: (tp > domain) if rules.tp_within_node else none,
        # Each virtual stage holds a layer at least; a framework that splits unevenly also counts the embedding and
        # the loss as one layer each (Megatron-Core's --account-for-embedding-in-pipeline-split and
        # --account-for-loss-in-pipeline-split, or a --pipeline-model-parallel-layout with empty first and last
        # virtual stages): Megatron-Bridge's Llama-3.1 405B recipe runs its 126 layers on pp 16 x vp 8 = 128 stages.
        5: (pp > model.n_layers) | (pp * vp > model.n_layers + (EMBEDDING_AND_LOSS_STAGES if uneven_ok else 0)),
        6: none if uneven_ok else model.n_layers % (pp * vp) != 0,
        7: (vp > 1) & (pp == 1),
        8: plans.sp & (tp == 1),
        9: (cp > 1) & (workload.seq_len % (2 * cp) != 0),
        # Sequence parallelism splits each context-parallel rank's seq/cp tokens over the tp ranks, evenly:
        # Megatron-Core's scatter_to_sequence_parallel_region asserts the split divides (8196 tokens on tp 8 fail
        # at the first forward)
        SP_SEQUENCE: plans.sp & (tp > 1) & (workload.seq_len % np.maximum(cp * tp, 1) != 0),
        10: (model.moe is not None) & (experts % ep != 0),
        # Megatron-Core's expert mapping (parallel_state.initialize_model_parallel): etp*ep must divide
        # the ranks of a stage, tp*cp*dp; with etp = tp this is ep dividing dp*cp.
        11: (model.moe is not None) & ((stage_ranks == 0) | (stage_ranks % (etp * ep) != 0)),
        12: (ep > 1) & (model.moe is None),
        16: (~plans.sp & (tp > 1)) if (rules.sp_with_tp and "sp" in dims) else none,
        # The framework: the parallelism it offers, and its schedules' constraints.
        FW_PARALLELISM: (((tp > 1) & ("tp" not in dims)) | (plans.sp & ("sp" not in dims)) | ((pp > 1) & ("pp" not in dims))
             | ((cp > 1) & ("cp" not in dims)) | ((ep > 1) & ("ep" not in dims))),
        FW_INTERLEAVED: interleaved & (("interleaved" not in fw.pipeline_schedules) | (pp < fw.interleave_min_pp)),
        ETP_DENSE: (model.moe is None) & (etp != tp),
        ETP_FFN: (model.moe is not None) & (etp != tp) & ((model.moe.expert_ffn_hidden_size if model.moe else 1) % etp != 0),
        ETP_NODE: ((model.moe is not None) & (etp != tp) & (etp > domain)) if rules.tp_within_node else none,
        FW_ETP: (model.moe is not None) & (((fw.expert_tp == "equal_tp") & (etp != tp))
                                           | ((fw.expert_tp == "none") & (etp != 1))),
        FW_DUALPIPE: dualpipe & ("dualpipe" not in fw.pipeline_schedules),
        # Megatron-Core's MoELayer.forward raises ValueError in training when the attention TP group has more than
        # one rank and sequence parallelism is off (framework.moe_tp_needs_sp); under the default space the
        # sp_with_tp rule rejects these plans first, under a space without it (or a --plan) this one does
        FW_MOE_SP: (model.moe is not None) & (tp > 1) & ~plans.sp & fw.moe_tp_needs_sp,
        # The cost model's pipeline (training.geometry) gives every stage but the last ceil(blocks/pp) blocks and the
        # last the rest, which holds the MTP modules (Megatron-Core puts them on the last stage, and the Megatron
        # emitter writes that layout): MiniMax-M2.5's 62 layers + 3 MTP blocks on pp=8 leave it 2 blocks for 3.
        MTP_STAGE: (pp > 1) & (model.mtp_layers > 0)
        & (last_stage_blocks(float(model.n_layers + model.mtp_layers), np.maximum(pp, 1)) < model.mtp_layers),
    }
    if not layout_only:
        supported = [CATEGORIES["precision"].index(p) for p in cluster.hardware.peak_tflops
                     if p in CATEGORIES["precision"] and trains_in(cluster.hardware, p)]
        checks[13] = (dp == 0) | (workload.global_batch % np.maximum(dp * plans.mbs, 1) != 0)
        checks[14] = ~np.isin(plans.precision, supported)
        checks[15] = (plans.offload == 1) & (plans.zero == 0)
        checks[FW_OFFLOAD] = (plans.offload == 1) & (not fw.optimizer_offload)
        zero_ok = np.where(pp > 1, np.isin(plans.zero, fw.zero_stages_with_pp), np.isin(plans.zero, fw.zero_stages))
        zero_ok &= ~((plans.zero == 3) & (plans.ep > 1) & (not fw.zero3_with_ep))
        zero_ok &= ~((plans.zero == 3) & (model.moe is not None) & (not fw.zero3_with_moe))
        checks[FW_ZERO] = ~zero_ok
        checks[FW_SELECTIVE] = (plans.recompute == CATEGORIES["recompute"].index("selective")) & (fw.selective_recompute == "none")
        # Megatron-Core and torch.distributed.pipelining refuse an interleaved schedule whose
        # micro-batch count is not a multiple of pp (framework.interleave_microbatches_multiple_of_pp).
        microbatches = workload.global_batch // np.maximum(dp * plans.mbs, 1)
        checks[FW_INTERLEAVE_MICROBATCHES] = interleaved & fw.interleave_microbatches_multiple_of_pp & (microbatches % np.maximum(pp, 1) != 0)
        checks[FW_FP8] = (plans.precision == CATEGORIES["precision"].index("fp8")) & (not fw.supports_fp8())
        checks[FW_FP4] = (plans.precision == CATEGORIES["precision"].index("fp4")) & (not fw.supports_fp4())
        # deepseek-ai/DualPipe dualpipe.py step(): an even number of ranks, and of micro-batches
        # (chunks), at least twice the ranks; one stage per rank and direction.
        checks[DUALPIPE_SHAPE] = dualpipe & ((pp < 2) | (pp % 2 != 0) | (vp != 1) | (microbatches % 2 != 0)
                                             | (microbatches < 2 * pp))
    return checks


# Compute capabilities TransformerEngine trains NVFP4 on (NVFP4BlockScaling): from 10.0 (datacenter Blackwell; TE's
# check_nvfp4_support asks for 10.0 or later) up to, not including, 12.0.
# The RTX PRO 6000 (12.0) has FP4 tensor cores, but TE's NVFP4 training fails there at its first quantized GEMM (its
# Hadamard-transform cast kernel: 'rht_gemm_ntt_w_sfc: invalid argument', TE's FSDP2 tests mark it failing on
# SM120), as TE refuses MXFP8 on 12.0 (outputs/emit/megatron.fp8_recipe).
NVFP4_TRAINING_CC = (10.0, 12.0)


def trains_in(hardware: Hardware, precision: str) -> bool:
    """Whether training can run its GEMMs in ``precision`` on the GPU: its tensor cores have it, and for NVFP4 the
    compute capability is one TransformerEngine trains it on (a profile that states none is taken at its word)."""
    if not hardware.supports(precision):
        return False
    cc = hardware.compute_capability
    return precision != "fp4" or cc is None or NVFP4_TRAINING_CC[0] <= cc < NVFP4_TRAINING_CC[1]


def _rule_values(reason: int, plan: Plan, model: ModelSpec | None, cluster: Cluster | None,
                 workload: TrainWorkload | None) -> str:
    """The numbers a rule compared, as "name=value" pairs ("" where the rule needs inputs not given): a user
    sees what to change, as in "global batch not divisible by dp*micro-batch (global_batch=1000, dp*mbs=8*2=16)"."""
    p, m, c, w = plan, model, cluster, workload
    n_gpus = c.n_gpus if c is not None else p.n_gpus
    model_parallel = p.tp * p.pp * p.cp
    dp = n_gpus // model_parallel if n_gpus % model_parallel == 0 else 0
    values: dict[int, Callable[[], str]] = {
        1: lambda: f"gpus={n_gpus}, tp*pp*cp={model_parallel}",
        7: lambda: f"vp={p.vp}, pp={p.pp}",
        FW_MOE_SP: lambda: f"tp={p.tp}, sp={str(p.sp).lower()}",
        11: lambda: f"etp*ep={p.etp * p.ep}, tp*cp*dp={n_gpus // p.pp}",
        12: lambda: f"ep={p.ep}",
    }
    if m is not None:
        values |= {2: lambda: f"heads={m.n_heads}, tp={p.tp}", 3: lambda: f"kv_heads={m.n_kv_heads}, tp={p.tp}",
                   5: lambda: f"pp*vp={p.pp * p.vp}, layers={m.n_layers}",
                   6: lambda: f"layers={m.n_layers}, pp*vp={p.pp * p.vp}"}
        if m.mtp_layers:
            last = int(last_stage_blocks(float(m.n_layers + m.mtp_layers), np.asarray(p.pp)))
            values[MTP_STAGE] = lambda: f"blocks on the last stage={last}, mtp_layers={m.mtp_layers}"
        if m.moe is not None:
            values[10] = lambda: f"experts={m.moe.n_experts}, ep={p.ep}"
            values[ETP_FFN] = lambda: f"expert_ffn_hidden_size={m.moe.expert_ffn_hidden_size}, etp={p.etp}"
    if c is not None:
        values |= {4: lambda: f"tp={p.tp}, GPUs per NVLink domain={c.gpus_per_scale_up_domain}",
                   ETP_NODE: lambda: f"etp={p.etp}, GPUs per NVLink domain={c.gpus_per_scale_up_domain}",
                   14: lambda: f"precision={p.precision}, {c.hardware.name} offers "
                               f"{', '.join(q for q in CATEGORIES['precision'] if trains_in(c.hardware, q))}"
                               + ("; TransformerEngine trains NVFP4 on compute capability 10.0 to 11.x only, and it is "
                                  f"{c.hardware.compute_capability:.1f}" if p.precision == "fp4"
                                  and c.hardware.supports("fp4") else "")}
    if w is not None:
        micro = w.global_batch // max(dp * p.mbs, 1)
        values |= {9: lambda: f"seq_len={w.seq_len}, 2*cp={2 * p.cp}",
                   SP_SEQUENCE: lambda: f"seq_len={w.seq_len}, cp*tp={p.cp}*{p.tp}={p.cp * p.tp}",
                   13: lambda: f"global_batch={w.global_batch}, dp*mbs={dp}*{p.mbs}={dp * p.mbs}",
                   FW_INTERLEAVE_MICROBATCHES: lambda: f"micro-batches={micro}, pp={p.pp}",
                   DUALPIPE_SHAPE: lambda: f"pp={p.pp}, vp={p.vp}, micro-batches={micro}"}
    return values[reason]() if reason in values else ""


def reason_text(reason: int, plan: Plan, framework: Framework | None = None, *, model: ModelSpec | None = None,
                cluster: Cluster | None = None, workload: TrainWorkload | None = None) -> str:
    """The rule a plan breaks, in words, naming the plan's values where the rule is the framework's, and the
    numbers the rule compared where the model, cluster and workload are given."""
    text = REASONS[reason]
    fw = framework if framework is not None else load_framework()
    if reason == FW_PARALLELISM:
        used = {"tp": plan.tp > 1, "sp": plan.sp, "pp": plan.pp > 1, "cp": plan.cp > 1, "ep": plan.ep > 1}
        missing = [f"{d}={getattr(plan, d)}" for d, on in used.items() if on and d not in fw.parallel_dims]
        text = (f"{fw.label} does not offer {', '.join(missing)} (it offers "
                f"{', '.join(fw.parallel_dims) or 'data parallelism only'})")
    elif reason == FW_ZERO and plan.zero == 3 and model is not None and model.moe is not None and not fw.zero3_with_moe:
        text = (f"{fw.label} does not offer ZeRO-3 for a mixture of experts (its MoE layers assert 'MoE not supported "
                "with Stage 3' at any ep): use zero=2 or less")
    elif reason == FW_ZERO and plan.zero == 3 and plan.ep > 1 and not fw.zero3_with_ep and 3 in (
            fw.zero_stages_with_pp if plan.pp > 1 else fw.zero_stages):
        text = (f"{fw.label} does not offer ZeRO-3 with expert parallelism (ep={plan.ep}): its MoE layers run with "
                "ZeRO stages 0 to 2 only; use zero=2 or less, or ep=1")
    elif reason == FW_ZERO:
        offered = fw.zero_stages_with_pp if plan.pp > 1 else fw.zero_stages
        text = (f"{fw.label} does not offer ZeRO-{plan.zero}" + (" with pipeline parallelism" if plan.pp > 1 else "")
                + (f" (it offers zero={' or '.join(map(str, offered))}" if offered else " (it offers none")
                + "; a plan string without zero= takes zero=1)")
    elif reason == FW_OFFLOAD:
        text = (f"{fw.label} does not offer optimizer CPU offload (offload=cpu); use offload=none, or a framework "
                "that offers it (deepspeed, megatron-deepspeed, megatron-bridge, "
                "megatron-lm from 2025-03, nemo from 25.04)")
    elif reason == FW_FP8:
        text = (f"{fw.label} does not offer fp8 training (precision=fp8); use precision=bf16, or a framework version "
                "that offers it")
    elif reason == FW_FP4:
        text = (f"{fw.label} does not offer fp4 (NVFP4) training (precision=fp4); use precision=fp8 or bf16, or a "
                "framework that offers it (megatron-lm from 2025-10, megatron-bridge from 2026-02)")
    elif reason == FW_MOE_SP:
        text = (f"{fw.label} refuses to train a mixture of experts with tensor parallelism but no sequence parallelism "
                "(Megatron-Core's MoELayer.forward raises ValueError at the first training step): use sp=true, or tp=1")
    values = _rule_values(reason, plan, model, cluster, workload)
    return f"{text} ({values})" if values else text


def rejection_reasons(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plans: PlanBatch, rules: Rules,
    *, layout_only: bool = False, framework: Framework | None = None,
) -> np.ndarray:
    """Reason code per plan (index into :data:`REASONS`); 0 for a valid plan.

    The first failing rule in :data:`REASONS` order is reported.  ``layout_only``
    checks only the rules on tp, pp, vp, cp, ep and sp.  ``framework`` (default: the
    default framework) adds what the software can run: the parallelism, ZeRO stages,
    recompute modes, schedules and precisions it offers.
    """
    fw = framework if framework is not None else load_framework()
    checks = _checks(model, cluster, workload, plans, rules, layout_only, fw)
    reasons = np.zeros(len(plans), dtype=np.int16)
    for code in sorted(checks, reverse=True):  # the first failing rule wins
        reasons[np.asarray(checks[code], dtype=bool)] = code
    return reasons


def plan_violation(model: ModelSpec, cluster: Cluster, workload: TrainWorkload, plan: Plan,
                   framework: Framework | None = None) -> str:
    """Why ``plan`` cannot run at all, in words (``""`` when it can): the first validity rule it breaks, the
    framework's included -- the rules a search applies, without a space's preferences (:data:`PERMISSIVE_RULES`).

    A plan read back from a file (a plans.json, perhaps edited) goes through this, as a plan string does."""
    fw = framework if framework is not None else load_framework()
    reason = int(rejection_reasons(model, cluster, workload, PlanBatch.from_plans([plan]), PERMISSIVE_RULES,
                                   framework=fw)[0])
    return reason_text(reason, plan, fw, model=model, cluster=cluster, workload=workload) if reason else ""


LAYOUT_KEYS = ("tp", "pp", "vp", "cp", "ep", "sp", "etp", "schedule")
SETTING_KEYS = ("zero", "mbs", "recompute", "precision", "offload")


def _product(columns: Mapping[str, tuple]) -> dict[str, np.ndarray]:
    keys = list(columns)
    grids = np.meshgrid(*[np.arange(len(columns[k])) for k in keys], indexing="ij")
    out = {}
    for key, grid in zip(keys, grids):
        values = columns[key]
        if key in CATEGORIES:
            values = [CATEGORIES[key].index(v) for v in values]
        if key == "etp":
            values = [0 if v == ETP_AS_TP else v for v in values]  # 0: as tp, resolved below
        out[key] = np.asarray(values)[grid.ravel()]
    if "etp" in out and "tp" in out:
        out["etp"] = np.where(out["etp"] == 0, out["tp"], out["etp"]).astype(np.int64)
        # etp: tp and an explicit etp equal to tp are the same plan: keep one.
        stacked = np.stack([np.asarray(out[k], dtype=np.int64) for k in keys], axis=1)
        _, first = np.unique(stacked, axis=0, return_index=True)
        keep = np.sort(first)
        out = {k: v[keep] for k, v in out.items()}
    return out


@dataclass(frozen=True)
class Enumeration:
    """Every valid plan of a space, and how many candidates each rule rejected."""

    plans: PlanBatch
    space_size: int
    rejected: Mapping[str, int]


def space_size(choices: Mapping[str, tuple]) -> int:
    """Distinct plans of the axes: as :func:`enumerate_valid` counts them (an etp equal to tp and "etp as tp" are one
    plan), so an exact search and a sampled one report the same space (DeepSeek-V3 on 2,048 GPUs read 1,451,520
    exact and 1,658,880 sampled)."""
    if all(k in choices for k in LAYOUT_KEYS):
        layouts = len(_product({k: choices[k] for k in LAYOUT_KEYS})["tp"])
        rest = [len(v) for k, v in choices.items() if k not in LAYOUT_KEYS]
        return int(layouts * np.prod(rest, dtype=np.float64))
    return int(np.prod([len(v) for v in choices.values()], dtype=np.float64))


def enumerate_valid(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, choices: Mapping[str, tuple], rules: Rules,
    framework: Framework | None = None,
) -> Enumeration:
    """All valid plans: the layout axes first (few), then their product with the settings."""
    layout = _product({k: choices[k] for k in LAYOUT_KEYS})
    settings = _product({k: choices[k] for k in SETTING_KEYS})
    n_layout, n_settings = len(layout["tp"]), len(settings["zero"])
    # Screen layouts with the first settings row, so layout-level rules are counted once per layout.
    probe = PlanBatch.from_columns(
        cluster.n_gpus, {**layout, **{k: np.repeat(settings[k][:1], n_layout) for k in SETTING_KEYS}}
    )
    fw = framework if framework is not None else load_framework()
    layout_reasons = rejection_reasons(model, cluster, workload, probe, rules, layout_only=True, framework=fw)
    counts: dict[str, int] = {}
    for code, count in zip(*np.unique(layout_reasons[layout_reasons > 0], return_counts=True)):
        counts[REASONS[code]] = counts.get(REASONS[code], 0) + int(count) * n_settings
    keep = np.flatnonzero(layout_reasons == 0)
    columns = {k: np.repeat(layout[k][keep], n_settings) for k in LAYOUT_KEYS}
    columns.update({k: np.tile(settings[k], len(keep)) for k in SETTING_KEYS})
    batch = PlanBatch.from_columns(cluster.n_gpus, columns)
    reasons = rejection_reasons(model, cluster, workload, batch, rules, framework=fw)
    for code, count in zip(*np.unique(reasons[reasons > 0], return_counts=True)):
        counts[REASONS[code]] = counts.get(REASONS[code], 0) + int(count)
    return Enumeration(plans=batch.take(np.flatnonzero(reasons == 0)), space_size=n_layout * n_settings, rejected=counts)


# Rules of the settings alone (precision, offload, recompute, fp8, fp4): what they reject does not depend on the layout.
_SETTINGS_RULES = (14, 15, FW_SELECTIVE, FW_FP8, FW_FP4, FW_OFFLOAD)


def rules_every_plan_breaks(
    model: ModelSpec, cluster: Cluster, workload: TrainWorkload, choices: Mapping[str, tuple], rules: Rules,
    framework: Framework | None = None,
) -> list[int]:
    """The rules every plan of the space breaks, whichever others it breaks too: a layout rule that every layout
    breaks, or a settings rule that every settings row breaks (``--fix offload=cpu`` on a framework without it).
    A count of first-failing rules hides such a rule behind the ones checked before it."""
    fw = framework if framework is not None else load_framework()
    layout = _product({k: choices[k] for k in LAYOUT_KEYS})
    settings = _product({k: choices[k] for k in SETTING_KEYS})
    n_layout, n_settings = len(layout["tp"]), len(settings["zero"])
    probe = PlanBatch.from_columns(
        cluster.n_gpus, {**layout, **{k: np.repeat(settings[k][:1], n_layout) for k in SETTING_KEYS}})
    every = [code for code, bad in _checks(model, cluster, workload, probe, rules, True, fw).items()
             if np.size(bad) and bool(np.all(bad))]
    rows = PlanBatch.from_columns(
        cluster.n_gpus, {**{k: np.repeat(layout[k][:1], n_settings) for k in LAYOUT_KEYS}, **settings})
    checks = _checks(model, cluster, workload, rows, rules, False, fw)
    every += [code for code in _SETTINGS_RULES if code in checks and np.size(checks[code])
              and bool(np.all(checks[code]))]
    return sorted(set(every))


__all__ = [
    "REASONS", "Rules", "PERMISSIVE_RULES", "Space", "rules_every_plan_breaks", "load_space", "space_from_mapping",
    "axis_choices", "rejection_reasons", "plan_violation", "enumerate_valid", "Enumeration", "space_size", "LAYOUT_KEYS", "SETTING_KEYS",
]
