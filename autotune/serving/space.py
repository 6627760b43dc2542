"""The serving search space (search_spaces/serve.yaml): axes, validity rules, exact enumeration.

Axes: ``mode`` (agg, disagg), ``tp``, ``pp``, ``dp``, ``ep`` (an integer, ``tp`` for the experts
spread over the TP ranks, or ``all`` for one expert group per GPU of the engine: ``ep = tp * dp``),
``weights``, ``kv``, ``max_batch`` (integers, taken down to a multiple of the decode DP ranks, or ``fit``
for the largest batch the engine's KV budget holds), and for disaggregated plans ``workers`` (engines per
pool).  A disaggregated plan's pools take their layouts from the same ``tp``, ``dp``, ``ep`` choices (one
pipeline stage each).

For a dense model, engine-native data parallelism (``dp > 1``) estimates the same as replicas behind a
router; the search plans replicas and keeps ``dp > 1`` only when it is pinned (``--fix dp=8``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import InputError, check_keys
from ..inputs import loading
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.resources import bundled_dir
from .checkpoint import fp8_scale_block
from .engines import engine_family
from .plan import (
    COMPUTE_PRECISION,
    KV_PRECISION,
    MODES,
    SERVE_CATEGORIES,
    WEIGHTS,
    ServePlanBatch,
    check_serve_field,
)

AXES = ("mode", "tp", "pp", "dp", "ep", "weights", "kv", "max_batch", "workers")
REQUIRED_AXES = ("tp", "pp", "weights", "kv", "max_batch")
AXIS_DEFAULTS: Mapping[str, tuple] = {"mode": ("agg",), "dp": (1,), "ep": (1,), "workers": (1,)}
# Plans an exact serving search enumerates at most.  Every plan is built in Python before the rules reject it
# (about 80 us a plan with its estimate), and the bundled serve.yaml holds 562,742 plans on 4,096 GB200 GPUs (40 s);
# a space file listing 3,000 tp choices held 19 million on 8 GPUs and ran for minutes without a word.
MAX_SERVE_PLANS = 2_000_000

REASONS: tuple[str, ...] = (
    "valid",
    "GPUs per replica do not divide the GPU count",
    "tp spans more than one NVLink domain",
    "heads not divisible by tp",
    "pipeline stages exceed layers",
    "ep > 1 on a dense model",
    "ep exceeds the model's experts",
    "weight precision not supported by the GPU",
    "KV-cache dtype not supported by the GPU",
    "ep does not divide tp*dp",
    "dense model: engine data parallelism equals replicas (pin dp to choose it)",
    "engine spans more nodes than the pipeline and data-parallel ranks can split",
    "expert FFN width not divisible by the GPUs each expert is split over (tp*dp/ep)",
    "mxfp4 weights on a dense model (the engines' MXFP4 quantizes MoE experts only)",
    "max_batch not a multiple of the decode dp (each attention-DP rank admits max_batch/dp sequences)",
    "the fp8 checkpoint's weight blocks do not divide the FFN or expert width each GPU holds",
)
# The rules no engine can launch against (a layout the model cannot split); the others are the GPU's precisions,
# memory or the search space's preferences (tp within a node), which `predict` prices and flags.
IMPOSSIBLE: frozenset[str] = frozenset({"heads not divisible by tp", "pipeline stages exceed layers",
                                        "ep > 1 on a dense model", "ep exceeds the model's experts",
                                        "ep does not divide tp*dp",
                                        "expert FFN width not divisible by the GPUs each expert is split over "
                                        "(tp*dp/ep)",
                                        "mxfp4 weights on a dense model (the engines' MXFP4 quantizes MoE experts "
                                        "only)",
                                        "max_batch not a multiple of the decode dp (each attention-DP rank admits "
                                        "max_batch/dp sequences)",
                                        "the fp8 checkpoint's weight blocks do not divide the FFN or expert width "
                                        "each GPU holds"})


# The search space's preferences among the rules: a plan that breaks one runs (tensor parallelism over nodes: vLLM
# and SGLang launch it multi-node) and is priced (its all-reduce over the network, estimate._link_bw), but search
# does not plan it.  `predict` flags it and still says the plan runs.
PREFERENCES: frozenset[str] = frozenset({"tp spans more than one NVLink domain",
                                         "engine spans more nodes than the pipeline and data-parallel ranks can "
                                         "split"})


@dataclass(frozen=True)
class ServeSpace:
    name: str
    axes: Mapping[str, tuple]
    source: str = ""
    pinned: frozenset = frozenset()

    pool_fixes: Mapping[str, Any] = None  # prefill_tp=4, decode_dp=8, ...: filters on disagg plans

    def fixed(self, fixes: Mapping[str, Any]) -> "ServeSpace":
        axes = dict(self.axes)
        pinned = set(self.pinned)
        pool_fixes = dict(self.pool_fixes or {})
        for key, value in fixes.items():
            side, _, name = key.partition("_")
            if side in ("prefill", "decode"):  # a pool key pins the mode to disagg and filters that pool
                axes["mode"] = ("disagg",)
                pool_fixes[key] = value
                pinned.add(name)
                if name == "workers" and value not in axes.get("workers", ()):
                    axes["workers"] = tuple(dict.fromkeys((*axes.get("workers", ()), value)))
                elif name != "workers" and value not in axes.get(name, ()):
                    axes[name] = tuple(dict.fromkeys((*axes.get(name, ()), value)))
                continue
            axes[key] = (value,)
            pinned.add(key)
        shared = sorted(set(fixes) & {"tp", "pp", "dp", "ep"})
        if tuple(axes.get("mode", ())) == ("disagg",) and shared:  # as a disagg plan string refuses tp=...
            raise ValueError(f"a disagg plan gives each pool its own layout: pin prefill_{shared[0]} and "
                             f"decode_{shared[0]} instead, but got ({shared[0]}={fixes[shared[0]]} with mode=disagg)")
        return ServeSpace(self.name, axes, self.source, frozenset(pinned), pool_fixes)

    def with_weights(self, precisions: Iterable[str]) -> ServeSpace:
        """The space with ``precisions`` (those a checkpoint holds) on its weights axis, unless weights is pinned:
        a gpt-oss checkpoint holds MXFP4, which the bundled space does not list, and without it every plan would
        need another checkpoint."""
        if "weights" in self.pinned:
            return self
        weights = tuple(dict.fromkeys((*self.axes["weights"], *sorted(precisions))))
        if weights == tuple(self.axes["weights"]):
            return self
        return dataclasses.replace(self, axes={**self.axes, "weights": weights})


def serve_space_from_mapping(data: dict, *, source: str) -> ServeSpace:
    axes_given = data.get("axes") if isinstance(data.get("axes"), dict) else {}
    if "rules" in data or {"zero", "mbs", "recompute", "cp"} & set(axes_given):  # a training space (train.yaml)
        raise InputError("must be a serving search space (axes tp, pp, dp, ep, weights, kv, max_batch), but got a "
                         "training one (rules; axes zero, mbs, recompute); give a serving space such as "
                         "search_spaces/serve.yaml", source=source)
    check_keys(data, frozenset({"name", "axes", "description"}), source=source)
    raw_axes = data.get("axes")
    if not isinstance(raw_axes, dict):
        raise InputError("must map each serve plan key to a list of choices", source=source, field="axes")
    check_keys(raw_axes, frozenset(AXES), source=source, section="axes")
    axes: dict[str, tuple] = {}
    for key in AXES:
        raw = raw_axes.get(key)
        if raw is None and key not in REQUIRED_AXES:
            axes[key] = AXIS_DEFAULTS[key]
            continue
        if not isinstance(raw, list) or not raw:
            raise InputError(f"must be a non-empty list of choices, e.g. {key}: [1, 2]", source=source, field=f"axes.{key}")
        values = []
        for v in raw:
            if (key == "ep" and v in ("tp", "all")) or (key == "max_batch" and v == "fit"):
                values.append(v)
                continue
            if key in SERVE_CATEGORIES and isinstance(v, str):
                v = v.lower()
            try:
                check_serve_field("prefill_workers" if key == "workers" else key, v)
            except ValueError as exc:
                hint = " (or tp, all)" if key == "ep" else " (or fit)" if key == "max_batch" else ""
                raise InputError(f"{exc}{hint}", source=source, field=f"axes.{key}") from None
            values.append(v)
        axes[key] = loading.distinct_choices(values, raw, source=source, field=f"axes.{key}")
    return ServeSpace(loading.text(data, "name", source=source, default=Path(source).stem), axes, source)


def load_serve_space(path: str | None) -> ServeSpace:
    if path is None:
        default = bundled_dir("search_spaces") / "serve.yaml"
        return serve_space_from_mapping(loading.read_mapping(default), source="search_spaces/serve.yaml")
    if not path.strip():  # as a path it is the working folder
        raise InputError(f"must not be empty: give a search-space YAML, or leave --space out for the bundled "
                         f"serve.yaml, but got {path!r}", field="--space")
    return serve_space_from_mapping(loading.read_mapping(Path(path)), source=path)


def _pool_checks(model: ModelSpec, cluster: Cluster, tp, pp, dp, ep) -> dict[int, np.ndarray]:
    experts = model.moe.n_experts if model.moe else 1
    expert_ffn = model.moe.expert_ffn_hidden_size if model.moe else 1
    heads = model.n_heads
    G = tp * dp
    moe_tp = np.where(G % ep == 0, G // np.maximum(ep, 1), 1)  # the GPUs one expert group's experts are split over
    node = cluster.gpus_per_node
    engine = tp * pp * dp
    return {
        2: tp > cluster.gpus_per_scale_up_domain,
        3: heads % tp != 0,
        4: pp > model.n_layers,
        5: (ep > 1) & (model.moe is None),
        # an ep that does not divide the experts fills its ranks with redundant copies (engines.physical_experts)
        6: (model.moe is not None) & (ep > experts),
        9: G % ep != 0,
        # an engine over several nodes splits by whole nodes: stages or data-parallel ranks per node
        11: (engine > node) & (tp > node) & (cluster.gpus_per_scale_up_domain <= node),
        # vLLM's and SGLang's FusedMoE split each expert's intermediate width over its moe_tp ranks and assert that
        # it divides (intermediate_size % tp_size == 0): attention DP 72 without EP splits DeepSeek's 2048 72 ways
        12: (model.moe is not None) & (expert_ffn % moe_tp != 0),
    }


# 4-bit float weights an engine runs weight-only (dequantised to bf16 in the GEMM) on a GPU without FP4 tensor
# cores, from Hopper on: MXFP4 in all three (gpt-oss on H100 and H200); NVFP4 in vLLM (Marlin W4A16 NVFP4,
# vllm-project/vllm#18000, with a warning) and SGLang (Marlin fallback, sgl-project/sglang#19652); TensorRT-LLM's
# NVFP4 kernels need Blackwell.  On AMD GPUs (ROCm) only MXFP4 (vLLM and SGLang serve gpt-oss on MI300X through
# Triton kernels); the Marlin kernels are CUDA-only.
FP4_WEIGHT_ONLY: Mapping[str, frozenset] = {"vllm": frozenset({"mxfp4", "fp4"}), "sglang": frozenset({"mxfp4", "fp4"}),
                                           "trtllm": frozenset({"mxfp4"})}
FP4_WEIGHT_ONLY_ROCM = frozenset({"mxfp4"})


# Ampere (compute capability 8.x, no FP8 tensor cores): vLLM runs FP8 checkpoints weight-only through its FP8 Marlin
# kernel, dense and MoE (vllm-project/vllm#5975, "Your GPU does not have native support for FP8 computation ...
# Weight-only FP8 compression will be used"), and MXFP4 through Marlin (its gpt-oss recipe lists A100); SGLang's FP8
# linear layers fall back to the same Marlin kernel there, but its FP8 MoE path does not (sgl-project/sglang#12887,
# #30681: "fp8e4nv not supported in this architecture"); TensorRT-LLM's FP8 needs Ada or later.
AMPERE_WEIGHT_ONLY: Mapping[str, frozenset] = {"vllm": frozenset({"fp8", "mxfp4"}), "sglang": frozenset({"fp8"}),
                                              "trtllm": frozenset()}
AMPERE_DENSE_ONLY: Mapping[str, frozenset] = {"sglang": frozenset({"fp8"})}


def fp4_weight_only(engine: str, hw) -> frozenset:
    """The 4-bit float weights ``engine`` runs weight-only on ``hw`` (none before Hopper / CDNA3: no fp8)."""
    if not hw.supports("fp8"):
        return frozenset()
    formats = FP4_WEIGHT_ONLY[engine_family(engine)]
    return formats & FP4_WEIGHT_ONLY_ROCM if hw.vendor == "amd" else formats


def weight_only_formats(engine: str, hw, is_moe: bool) -> frozenset:
    """The weight formats ``engine`` runs weight-only (dequantised to bf16 in the GEMM) on ``hw``, which has no tensor
    cores for them: 4-bit floats from Hopper on, FP8 (and vLLM's MXFP4) on NVIDIA Ampere."""
    formats = fp4_weight_only(engine, hw)
    cc = hw.compute_capability
    if hw.vendor == "nvidia" and not hw.supports("fp8") and cc is not None and cc >= 8.0:
        family = engine_family(engine)
        ampere = AMPERE_WEIGHT_ONLY[family]
        if is_moe:
            ampere = ampere - AMPERE_DENSE_ONLY.get(family, frozenset())
        formats = formats | ampere
    return formats


# A block-scaled FP8 checkpoint (DeepSeek-V3/R1, Qwen3 -FP8, MiniMax: the catalogue's ``fp8_block``, its config's
# weight_block_size) holds one scale per 128x128 block of every linear weight, and the engines load it only where
# each GPU's slice of a split width is a whole number of blocks: vLLM "output_size ... is not divisible by weight
# quantization block_n = 128" (vllm-project/vllm#17569, #25292), the same with SGLang (QwenLM/Qwen3#1485):
# Qwen3-235B-A22B-FP8's 1536-wide experts over 8 GPUs (192 each).  Online FP8 from bf16 and per-tensor or
# per-channel FP8 (NVIDIA's ModelOpt exports, compressed-tensors) have no blocks; so has an fp8 checkpoint of an
# architecture whose published fp8 checkpoints are not all block-scaled (--checkpoint fp8 cannot say which).


def _split_misfit(width: int, ways, block: int) -> np.ndarray:
    """A width split ``ways`` ways leaves a GPU a part of a block (an unsplit width loads whole, as published)."""
    ways = np.asarray(ways)
    return (ways > 1) & ((width % np.maximum(ways, 1) != 0) | ((width // np.maximum(ways, 1)) % block != 0))


def _fp8_block_misfit(model: ModelSpec, tp, dp, ep, block: int) -> np.ndarray:
    """A pool whose experts (over tp*dp/ep GPUs) or dense FFN (over tp) leave a GPU part of a ``block``-wide block."""
    bad = np.zeros(np.shape(tp), dtype=bool)
    if model.moe is not None:
        G = tp * dp
        moe_tp = np.where(G % ep == 0, G // np.maximum(ep, 1), 1)
        bad |= _split_misfit(model.moe.expert_ffn_hidden_size, moe_tp, block)
        # the shared expert(s) are one MLP of their total width, split over tp as a dense one is
        bad |= _split_misfit(model.moe.shared_expert_ffn_hidden_size, tp, block)
    if model.n_dense_layers > 0:
        bad |= _split_misfit(model.ffn_hidden_size, tp, block)
    return bad


def rejection_reasons(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch,
                      pinned: frozenset = frozenset({"dp"}), *, engine: str, checkpoint: str | None = None) -> np.ndarray:
    """Reason code per plan (index into REASONS); 0 for a runnable plan. The first failing rule wins.
    ``checkpoint`` (--checkpoint): the weights the plans read (None: no rule of the checkpoint's)."""
    hw = cluster.hardware
    weight_only = weight_only_formats(engine, hw, model.moe is not None)
    weights_ok = np.array([hw.supports(COMPUTE_PRECISION[w]) or w in weight_only for w in SERVE_CATEGORIES["weights"]])
    kv_ok = np.array([hw.supports(KV_PRECISION[k]) for k in SERVE_CATEGORIES["kv"]])
    checks: dict[int, np.ndarray] = {1: cluster.n_gpus % plans.gpus_per_replica != 0}
    for side in ("p", "d"):
        cols = [getattr(plans, f"{side}_{k}") for k in ("tp", "pp", "dp", "ep")]
        for code, bad in _pool_checks(model, cluster, *cols).items():
            checks[code] = checks.get(code, False) | np.asarray(bad, dtype=bool)
    checks[7] = ~weights_ok[plans.weights]
    checks[8] = ~kv_ok[plans.kv]
    if "dp" not in pinned and model.moe is None:
        checks[10] = (plans.p_dp > 1) | (plans.d_dp > 1)
    if model.moe is None:
        # vLLM's and SGLang's Mxfp4Config hand every linear layer but the fused MoE experts to the unquantized method,
        # and TensorRT-LLM's MXFP4 is a MoE backend: a dense model has nothing an MXFP4 checkpoint quantizes
        checks[13] = plans.weights == SERVE_CATEGORIES["weights"].index("mxfp4")
    # vLLM's --max-num-seqs is per DP rank and SGLang divides --max-running-requests among its attention-DP ranks:
    # a limit that is not a whole number per rank is launched as another total than the one estimated
    checks[14] = plans.max_batch % plans.d_dp != 0
    block = fp8_scale_block(model) if checkpoint == "fp8" else None
    if block:  # fp8 weights read from a block-scaled checkpoint (bf16 or other weights are not)
        fp8 = plans.weights == SERVE_CATEGORIES["weights"].index("fp8")
        checks[15] = fp8 & (_fp8_block_misfit(model, plans.p_tp, plans.p_dp, plans.p_ep, block)
                            | _fp8_block_misfit(model, plans.d_tp, plans.d_dp, plans.d_ep, block))
    reasons = np.zeros(len(plans), dtype=np.int16)
    for code in sorted(checks, reverse=True):
        reasons[np.asarray(checks[code], dtype=bool)] = code
    return reasons


def reason_text(code: int, plan, model: ModelSpec | None = None) -> str:
    """A rule a serve plan breaks, with the numbers it compared and the way out where one is simple."""
    why = REASONS[code]
    if code == 15 and model is not None:
        block = fp8_scale_block(model) or 128
        pools = plan.pools()
        pool = next((q for q in pools if bool(_fp8_block_misfit(model, np.int64(q.tp), np.int64(q.dp),
                                                                    np.int64(q.ep), block))), pools[1])
        widths = []
        if model.moe is not None:
            moe_tp = pool.tp * pool.dp // pool.ep if (pool.tp * pool.dp) % pool.ep == 0 else 1
            if bool(_split_misfit(model.moe.expert_ffn_hidden_size, moe_tp, block)):
                widths.append(f"expert width {model.moe.expert_ffn_hidden_size}/{moe_tp} GPUs = "
                              f"{model.moe.expert_ffn_hidden_size / moe_tp:g}")
        shared = model.moe.shared_expert_ffn_hidden_size if model.moe is not None else 0
        if bool(_split_misfit(shared, pool.tp, block)):
            widths.append(f"shared-expert width {shared}/tp {pool.tp} = {shared / pool.tp:g}")
        if model.n_dense_layers > 0 and bool(_split_misfit(model.ffn_hidden_size, pool.tp, block)):
            widths.append(f"FFN width {model.ffn_hidden_size}/tp {pool.tp} = {model.ffn_hidden_size / pool.tp:g}")
        why += f" ({'; '.join(widths)}, blocks of {block})"
        fewer = "a larger ep or a smaller tp" if model.moe is not None else "a smaller tp"
        why += f"; give a layout that splits it fewer ways ({fewer}) or a bf16 checkpoint"
    if code == 14:
        dp = plan.decode.dp if plan.disaggregated else plan.dp
        below = max(plan.max_batch - plan.max_batch % dp, dp)
        near = sorted({below, below + dp} - {plan.max_batch})
        why += (f" (max_batch={plan.max_batch}, dp={dp}); give max_batch=" + " or ".join(str(b) for b in near))
    return why


@dataclass(frozen=True)
class ServeEnumeration:
    plans: ServePlanBatch
    space_size: int
    rejected: Mapping[str, int]
    fit_batch: bool  # the space asked for the KV-cache-bound batch as a max_batch choice


def _ep_values(choices, tp: int, dp: int) -> list[int]:
    return sorted({tp if e == "tp" else tp * dp if e == "all" else int(e) for e in choices})


def _check_space_size(space: ServeSpace, cluster: Cluster, layouts: list[tuple], n_batches: int) -> None:
    """Refuse a space of more than ``MAX_SERVE_PLANS`` plans before any is built: the agg plans exactly, the disagg
    pairs counted from their pools' GPU counts (before the model's rules, which need the plans built)."""
    axes = space.axes
    per_layout = len(axes["weights"]) * len(axes["kv"])
    size = len(layouts) * per_layout * n_batches if "agg" in axes["mode"] else 0
    if "disagg" in axes["mode"] and cluster.n_gpus >= 2:
        pool_gpus: dict[int, int] = {}  # GPUs of one pool -> how many pools take that many
        for tp, pp, dp, ep in layouts:
            if pp != 1:
                continue
            for workers in axes["workers"]:
                gpus = workers * tp * dp
                if gpus < cluster.n_gpus:
                    pool_gpus[gpus] = pool_gpus.get(gpus, 0) + 1
        pairs = sum(a * b for ga, a in pool_gpus.items() for gb, b in pool_gpus.items()
                    if cluster.n_gpus % (ga + gb) == 0)
        size += pairs * per_layout * n_batches
    if size > MAX_SERVE_PLANS:
        counts = ", ".join(f"{key} {len(values):,}" for key, values in axes.items() if len(values) > 1)
        raise InputError(f"an exact serving search must enumerate at most {MAX_SERVE_PLANS:,} plans, but got "
                         f"({size:,} plans on {cluster.n_gpus:,} GPUs from choices {counts}); list fewer choices "
                         "(the bundled serve.yaml holds about 560,000 on 4,096 GPUs) or pin axes with --fix",
                         source=space.source or None, field="axes")


def _product(*sizes: int) -> list[np.ndarray]:
    """Index arrays over ``sizes`` in itertools.product order (the last index fastest)."""
    grids = np.meshgrid(*[np.arange(n, dtype=np.int64) for n in sizes], indexing="ij")
    return [g.ravel() for g in grids]


def enumerate_serve(model: ModelSpec, cluster: Cluster, space: ServeSpace, *, engine: str,
                    checkpoint: str | None = None) -> ServeEnumeration:
    """Every valid plan of the space (``max_batch: fit`` is resolved later, per layout) from ``checkpoint``."""
    axes = dict(space.axes)
    fit_batch = "fit" in axes["max_batch"]
    batches = tuple(v for v in axes["max_batch"] if v != "fit") or (1,)
    layouts = [(tp, pp, dp, ep) for tp in axes["tp"] for pp in axes["pp"] for dp in axes["dp"]
               for ep in _ep_values(axes["ep"], tp, dp)]
    _check_space_size(space, cluster, layouts, len(batches))
    # the columns of every plan as arrays, in itertools.product order (layout, weights, kv, batch): a search of an
    # NVL72 rack holds 3 * 10^5 plans, which took seconds to append one value at a time
    codes = {k: np.array([SERVE_CATEGORIES[k].index(v) for v in axes[k]], dtype=np.int8) for k in ("weights", "kv")}
    parts: list[dict[str, np.ndarray]] = []
    size = 0
    if "agg" in axes["mode"] and layouts:
        lay = np.array(layouts, dtype=np.int64)
        li, wi, ki, bi = _product(len(layouts), len(axes["weights"]), len(axes["kv"]), len(batches))
        part = {"mode": np.zeros(li.size, np.int8), "weights": codes["weights"][wi], "kv": codes["kv"][ki],
                "max_batch": np.array(batches, dtype=np.int64)[bi]}
        for j, k in enumerate(("tp", "pp", "dp", "ep")):
            part[k] = part[f"p_{k}"] = part[f"d_{k}"] = lay[li, j]
        part["p_workers"] = part["d_workers"] = np.ones(li.size, np.int64)
        parts.append(part)
        size += li.size
    if "disagg" in axes["mode"] and cluster.n_gpus >= 2:
        # pools: one pipeline stage each; a prefill engine needs no batch limit (the decode engines' is the plan's)
        single = [(tp, 1, dp, ep) for (tp, pp, dp, ep) in layouts if pp == 1]
        if single:  # pools that break a rule on their own never make a valid pair
            cols = [np.array([lay[i] for lay in single]) for i in range(4)]
            bad = np.logical_or.reduce([np.asarray(b, dtype=bool) * np.ones(len(single), bool)
                                        for b in _pool_checks(model, cluster, *cols).values()])
            if "dp" not in space.pinned and model.moe is None:
                bad |= cols[2] > 1
            single = [lay for lay, b in zip(single, bad) if not b]
        pools = [(w, tp, 1, dp, ep) for (tp, _, dp, ep) in single for w in axes["workers"]]
        pools = [p for p in pools if p[0] * p[1] * p[3] < cluster.n_gpus]
        pairs = [(p, d) for p in pools for d in pools
                 if cluster.n_gpus % (p[0] * p[1] * p[3] + d[0] * d[1] * d[3]) == 0]
        # a decode pool's batch limit below 64 sequences gives away what disaggregation is for
        d_batches = tuple(b for b in batches if b >= 64) or (max(batches),)
        if pairs:
            pre = np.array([p for p, _ in pairs], dtype=np.int64)
            dec = np.array([d for _, d in pairs], dtype=np.int64)
            pi, wi, ki, bi = _product(len(pairs), len(axes["weights"]), len(axes["kv"]), len(d_batches))
            part = {"mode": np.ones(pi.size, np.int8), "weights": codes["weights"][wi], "kv": codes["kv"][ki],
                    "max_batch": np.array(d_batches, dtype=np.int64)[bi]}
            for j, k in enumerate(("workers", "tp", "pp", "dp", "ep")):
                part[f"p_{k}"], part[f"d_{k}"] = pre[pi, j], dec[pi, j]
                if k != "workers":
                    part[k] = dec[pi, j]
            parts.append(part)
            size += pi.size
    if not sum(part["tp"].size for part in parts):
        empty = ServePlanBatch.from_columns(cluster.n_gpus, {k: np.zeros(0, np.int64) for k in ("tp", "pp", "dp", "ep", "max_batch")}
                                            | {"weights": np.zeros(0, np.int8), "kv": np.zeros(0, np.int8)})
        return ServeEnumeration(empty, size, {}, fit_batch)
    columns = {k: np.concatenate([part[k] for part in parts]) for k in parts[0]}
    # the space's batch limits are the engine's; each decode DP rank admits a whole number of them, so a limit is
    # taken down to a multiple of the ranks (at least one a rank): 128 on 72 ranks is 72, 8 on 64 ranks is 64.  A
    # limit the user pinned (--fix max_batch=100) is kept as given: plans whose dp it does not divide are rejected
    # by the rule, as predict and emit refuse them, not searched at another limit.
    if "max_batch" not in space.pinned:
        dp = columns["d_dp"]
        columns["max_batch"] = np.maximum(columns["max_batch"] - columns["max_batch"] % dp, dp)
    _, once = np.unique(np.column_stack([columns[k] for k in sorted(columns)]), axis=0, return_index=True)
    columns = {k: v[np.sort(once)] for k, v in columns.items()}
    batch = ServePlanBatch.from_columns(cluster.n_gpus, columns)
    for key, value in (space.pool_fixes or {}).items():
        side, _, name = key.partition("_")
        keep = ~batch.disagg | (getattr(batch, f"{side[0]}_{name}") == value)
        batch = batch.take(np.flatnonzero(keep))
    reasons = rejection_reasons(model, cluster, batch, space.pinned, engine=engine, checkpoint=checkpoint)
    counts: dict[str, int] = {}
    for code, count in zip(*np.unique(reasons[reasons > 0], return_counts=True)):
        counts[REASONS[code]] = int(count)
    return ServeEnumeration(batch.take(np.flatnonzero(reasons == 0)), size, counts, fit_batch)


__all__ = ["REASONS", "ServeSpace", "ServeEnumeration", "enumerate_serve", "load_serve_space", "reason_text",
           "rejection_reasons",
           "serve_space_from_mapping", "MODES", "WEIGHTS"]
