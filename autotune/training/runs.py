"""Measured training runs in the schema of ``training_runs.csv`` (see docs/validation.md).

Each row names a model's architecture, a GPU type and count, the layout and
settings, and a measured throughput.  A setting the row leaves empty is never
filled silently: :func:`candidate_plans` returns every value it could have
taken, and validation reports the range of predictions over them.
"""

from __future__ import annotations

import dataclasses
import itertools
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..inputs.hardware import Cluster, Hardware
from ..inputs.measured_runs import layout_reason, number, parse_rows, read_table
from ..inputs.modelspec import ModelSpec, MoESpec
from ..inputs.workload import TrainWorkload
from .plan import Plan

ATTENTION_KERNELS = ("flash", "unfused", "cudnn")
# NVIDIA's stacks: NeMo and Megatron-LM / Megatron-Core run attention through TransformerEngine,
# whose DotProductAttention picks cuDNN's fused attention on Hopper (faster than FlashAttention-2).
# Named in the `source` cell (not the notes, which cite NeMo's tables for other rows' constants).
_NVIDIA_STACK = re.compile(r"\b(NeMo|Megatron-LM|Megatron-Core|TransformerEngine)\b")
# FlashAttention was published in mid-2022 (Dao et al., arXiv:2205.14135) and reached
# Megatron-LM in 2023 (--use-flash-attn); runs published in 2022 or earlier used Megatron's
# unfused attention (two batched GEMMs and a fused scale-mask-softmax kernel).
FLASH_ATTENTION_FIRST_YEAR = 2023

# A year in the `source` text: 19xx or 20xx standing alone (not part of an arXiv id such as
# 2104.04473, a commit hash or a longer number).  The first one is the publication year:
# sources name the paper or document first, then later venues and commits.
_YEAR = re.compile(r"(?<![\w.])((?:19|20)\d\d)(?![\w]|\.\d)")

# Physical variants of a bundled GPU that some rows ran on, keyed by (profile, variant).
POWER_LIMITED = "power-limited"
HARDWARE_VARIANTS: dict[tuple[str, str], dict[str, float | str]] = {
    # torchtitan's Grand Teton H100s (benchmarks/llama3_h100_202412_torchtitan.md, docs/performance.md):
    # "96GB HBM2e with 2.4 TB/sec peak memory bandwidth", "the default 500W power limit"; footnote 2:
    # "the actual peak TFLOPs number is between SXM and NVL, and we don't know its exact value".
    # We take the midpoint of the dense bf16 peaks of H100 SXM (989.5) and H100 NVL (835.5,
    # data/hardware.md) = 912.5 TFLOP/s, i.e. every tensor-core peak x 0.922 (a lower sustained
    # clock under the power cap); NVLink and NICs are unchanged.
    ("h100-sxm5-80gb", POWER_LIMITED): {
        "description": "H100 SXM 96GB HBM2e at a 500 W power limit (Grand Teton)",
        "memory_gib": 96.0,
        "memory_bandwidth_gb_per_s": 2400.0,
        "tdp_w": 500.0,
        "peak_scale": (989.5 + 835.5) / 2.0 / 989.5,
    },
}


def variant_hardware(hardware: Hardware, variant: str | None) -> Hardware:
    """The hardware a row ran on: ``hardware`` itself, or its documented physical variant."""
    if not variant:
        return hardware
    spec = HARDWARE_VARIANTS.get((hardware.name, variant))
    if spec is None:
        raise KeyError(f"no model of the {variant} variant of {hardware.name}")
    scale = float(spec["peak_scale"])
    return dataclasses.replace(
        hardware,
        name=f"{hardware.name}+{variant}",
        description=str(spec["description"]),
        peak_tflops={k: v * scale for k, v in hardware.peak_tflops.items()},
        memory_gib=float(spec["memory_gib"]),
        memory_bandwidth_gb_per_s=float(spec["memory_bandwidth_gb_per_s"]),
        tdp_w=float(spec["tdp_w"]),
        average_power_w=min(hardware.average_power_w, float(spec["tdp_w"])),
    )


def publication_year(source: str) -> int | None:
    """The first stand-alone year in a ``source`` cell (the paper's or document's year), if any."""
    match = _YEAR.search(source or "")
    return int(match.group(1)) if match else None


def infer_attention_kernel(row: dict) -> tuple[str, str | None]:
    """The row's attention kernel and, when it was not stated, how it was inferred.

    An ``attention_kernel`` column (flash|unfused|cudnn) wins; otherwise the publication year in
    ``source`` decides: 2022 or earlier -> ``unfused``; later (or no year found) -> ``cudnn`` when
    the source names NVIDIA's stack (NeMo, Megatron-LM, Megatron-Core, TransformerEngine), else
    ``flash``.
    """
    stated = (row.get("attention_kernel") or "").strip().lower()
    if stated:
        if stated not in ATTENTION_KERNELS:
            raise InputError(f"row {row.get('id')!r}: must be one of {', '.join(ATTENTION_KERNELS)}, but got {stated!r}",
                             field="attention_kernel")
        return stated, None
    source = row.get("source") or ""
    year = publication_year(source)
    if year is not None and year < FLASH_ATTENTION_FIRST_YEAR:
        return "unfused", f"inferred from publication year {year} in source (<= {FLASH_ATTENTION_FIRST_YEAR - 1})"
    stack = _NVIDIA_STACK.search(source)
    if stack:
        return "cudnn", (f"source names {stack.group(1)} (TransformerEngine attention: cuDNN fused)"
                         + (f", published {year}" if year is not None else ""))
    if year is None:
        return "flash", "no attention_kernel column and no year in source: assumed flash"
    return "flash", f"inferred from publication year {year} in source (>= {FLASH_ATTENTION_FIRST_YEAR})"


ZERO3_COLLECTIVES = ("block", "submodule")
# DeepSpeed ZeRO-3 as published in 2021 fetched (and reduced) the parameters of every submodule
# (each linear and norm) with its own collectives; coalesced, bucketed fetches came with later
# releases (2022 on).  Everything
# else shards per transformer block (PyTorch FSDP/FSDP2 wrap each block as one flat unit).
DEEPSPEED_COALESCED_FIRST_YEAR = 2022


def infer_zero3_collectives(row: dict) -> tuple[str, str | None]:
    """Granularity of the row's ZeRO-3 collectives (``block`` or ``submodule``) and how it was inferred.

    A ``zero3_collectives`` column wins; otherwise ``submodule`` for ZeRO-3 rows whose notes or
    source name DeepSpeed and whose publication year is before 2022, else ``block``.
    """
    stated = (row.get("zero3_collectives") or "").strip().lower()
    if stated:
        if stated not in ZERO3_COLLECTIVES:
            raise InputError(f"row {row.get('id')!r}: must be one of {', '.join(ZERO3_COLLECTIVES)}, but got {stated!r}",
                             field="zero3_collectives")
        return stated, None
    if (row.get("zero") or "").strip() != "3":
        return "block", None
    text = f"{row.get('notes') or ''} {row.get('source') or ''}".lower()
    year = publication_year(row.get("source") or "")
    if "deepspeed" in text and year is not None and year < DEEPSPEED_COALESCED_FIRST_YEAR:
        return "submodule", (f"DeepSpeed ZeRO-3 published in {year} (< {DEEPSPEED_COALESCED_FIRST_YEAR}): "
                          "collectives per submodule")
    return "block", None


PIPELINE_RUNTIMES = ("megatron", "torch")
# torchtitan's own name in a row's source or notes: the run used torchtitan's pipeline runtime
# (torch.distributed.pipelining) and its defaults.
_TORCHTITAN = re.compile(r"torchtitan", re.IGNORECASE)


def infer_pipeline_runtime(row: dict) -> tuple[str, str | None]:
    """What the row's pipeline schedule keeps in memory (``megatron`` or ``torch``) and how it was inferred.

    A ``pipeline_runtime`` column wins; otherwise ``torch`` (torch.distributed.pipelining) when the
    source or notes name torchtitan, else ``megatron`` (Megatron-LM, NeMo, DeepSpeed schedules).
    Only pipeline-parallel rows are affected.
    """
    stated = (row.get("pipeline_runtime") or "").strip().lower()
    if stated:
        if stated not in PIPELINE_RUNTIMES:
            raise InputError(f"row {row.get('id')!r}: must be one of {', '.join(PIPELINE_RUNTIMES)}, but got {stated!r}",
                             field="pipeline_runtime")
        return stated, None
    if _TORCHTITAN.search(f"{row.get('source') or ''} {row.get('notes') or ''}"):
        return "torch", "torchtitan named in source/notes: torch.distributed.pipelining"
    return "megatron", None


def infer_microbatches(row: dict, runtime: str) -> tuple[int | str | None, str | None]:
    """Micro-batches per step per pipeline for a row that leaves ``micro_batch`` empty, if known.

    An ``n_microbatches`` column (a number, or ``stages``) wins.  Otherwise, for a pipeline-parallel
    row on torchtitan's runtime: ``stages`` -- torchtitan's default (2024) splits the local batch
    into as many micro-batches as there are pipeline stages, pp x vp
    (``experimental.pipeline_parallel_microbatches`` unset).  Else None (unknown).
    """
    stated = (row.get("n_microbatches") or "").strip().lower()
    if stated:
        if stated == "stages":
            return "stages", None
        try:
            return _int(row, "n_microbatches"), None
        except InputError:
            raise InputError(f"row {row.get('id')!r}: must be a number or 'stages', but got {stated!r}",
                             field="n_microbatches") from None
    if (row.get("micro_batch") or "").strip():
        return None, None
    pp = _int(row, "pp")
    if runtime == "torch" and pp and pp > 1:
        return "stages", "torchtitan default: as many micro-batches as pipeline stages (pp x vp)"
    return None, None


REQUIRED_COLUMNS = (
    "id", "n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "vocab_size", "seq_len", "gpu", "n_gpus",
    "tp", "pp", "measured_tokens_per_s_per_gpu",
)


# Columns that hold a size or a parallel degree: a whole number >= 1 when the row gives one.
SIZE_COLUMNS = ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size",
                "seq_len", "n_gpus", "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch",
                "global_batch", "moe_topk", "moe_ffn_hidden_size")


@dataclass(frozen=True)
class MeasuredRun:
    """One usable row: everything needed to predict it, and what was measured."""

    id: str
    source_group: str
    model: ModelSpec
    gpu: str
    n_gpus: int
    gpus_per_node: int | None
    workload: TrainWorkload
    known: dict[str, Any]  # plan fields the row states
    unknown: tuple[str, ...]  # plan fields the row leaves empty
    measured_tokens_per_s_per_gpu: float
    measured_memory_gib_per_gpu: float | None
    notes: str = ""
    extra: dict[str, str] = field(default_factory=dict)
    source: str = ""
    attention_kernel: str = "flash"  # flash | unfused | cudnn (see infer_attention_kernel)
    hardware_variant: str | None = None  # e.g. POWER_LIMITED: see HARDWARE_VARIANTS
    zero3_collectives: str = "block"  # block | submodule (see infer_zero3_collectives)
    pipeline_runtime: str = "megatron"  # megatron | torch (see infer_pipeline_runtime)
    microbatches: int | str | None = None  # per step per pipeline when micro_batch is empty: a number, "stages" or unknown
    inferred: dict[str, str] = field(default_factory=dict)  # field -> how its value was inferred

    def hardware(self, profile: Hardware) -> Hardware:
        """The GPU this row ran on: ``profile`` or its physical variant (raises KeyError if unmodelled)."""
        return variant_hardware(profile, self.hardware_variant)

    def cluster(self, hardware: Hardware) -> Cluster:
        gpn = self.gpus_per_node or hardware.gpus_per_node
        return Cluster(hardware=hardware, n_gpus=self.n_gpus, gpus_per_node=min(gpn, self.n_gpus))


@dataclass(frozen=True)
class SkippedRow:
    id: str
    reason: str


def _int(row: dict, key: str) -> int | None:
    return number(row, key, whole=True)  # type: ignore[return-value]


def _float(row: dict, key: str) -> float | None:
    return number(row, key)


def _positive(row: dict, key: str) -> float | None:
    """A measurement: empty, or a number > 0 (a zero or negative one cannot be compared with)."""
    value = _float(row, key)
    if value is not None and value <= 0:
        raise InputError(f"row {row.get('id')!r}: a measurement must be > 0, but got {value!r}", field=key)
    return value


def _bool(row: dict, key: str) -> bool | None:
    value = (row.get(key) or "").strip().lower()
    if not value:
        return None
    if value in ("true", "1", "yes"):
        return True
    if value in ("false", "0", "no"):
        return False
    raise InputError(f"row {row.get('id')!r}: must be true or false, but got {value!r}", field=key)


def _model(row: dict, dropout: bool) -> ModelSpec:
    n_heads = _int(row, "n_heads")
    hidden = _int(row, "hidden_size")
    experts = _int(row, "moe_experts")
    moe = None
    if experts:
        shared = _int(row, "moe_shared_experts") or 0
        expert_ffn = _int(row, "moe_ffn_hidden_size") or _int(row, "ffn_hidden_size")
        moe = MoESpec(n_experts=experts, top_k=_int(row, "moe_topk") or 1, expert_ffn_hidden_size=expert_ffn,
                      n_shared_experts=shared, shared_expert_ffn_hidden_size=shared * expert_ffn)
    head_dim = _int(row, "head_dim") or hidden // n_heads
    return ModelSpec(
        name=row.get("model_name") or row["id"],
        n_layers=_int(row, "n_layers"),
        hidden_size=hidden,
        ffn_hidden_size=_int(row, "ffn_hidden_size"),
        n_heads=n_heads,
        n_kv_heads=_int(row, "n_kv_heads") or n_heads,
        head_dim=head_dim,
        vocab_size=_int(row, "vocab_size"),
        mlp=(row.get("activation") or "gelu").strip(),
        tied_embeddings=bool(_bool(row, "tied_embeddings")),
        dropout=dropout,
        moe=moe,
    )


def parse_row(row: dict) -> MeasuredRun | SkippedRow:
    rid = row["id"]
    if (row.get("usable") or "true").strip().lower() == "false":
        return SkippedRow(rid, "marked unusable in the file: " + (row.get("notes") or "").split(";")[0][:120])
    missing = [k for k in REQUIRED_COLUMNS if not (row.get(k) or "").strip()]
    if missing:
        return SkippedRow(rid, f"no value for {', '.join(missing)}")
    for key in SIZE_COLUMNS:  # sizes and parallel degrees: whole numbers >= 1 when given
        number(row, key, whole=True, minimum=1)
    layout = layout_reason(_int(row, "n_gpus"), [(k, _int(row, k)) for k in ("tp", "pp", "cp")], _int(row, "dp"))
    if layout:
        return SkippedRow(rid, layout)
    global_batch = _int(row, "global_batch")
    if global_batch is None:
        return SkippedRow(rid, "no global_batch: the number of micro-batches (and so the bubble) is unknown")
    inferred: dict[str, str] = {}
    kernel, how = infer_attention_kernel(row)
    if how:
        inferred["attention_kernel"] = how
    # Dropout: a `dropout` column wins; otherwise the Megatron-LM of the unfused era trained GPT
    # with its defaults --attention-dropout 0.1 --hidden-dropout 0.1 (the sc21 scripts, CONFIG.sh,
    # do not override them), while current recipes (MPT, Llama, NeMo) train without dropout.
    dropout = _bool(row, "dropout")
    if dropout is None:
        dropout = kernel == "unfused"
        inferred["dropout"] = (f"{str(dropout).lower()}: Megatron-LM defaults of the unfused-attention era"
                               if dropout else "false: current recipes train without dropout")
    granularity, how = infer_zero3_collectives(row)
    if how:
        inferred["zero3_collectives"] = how
    runtime, how = infer_pipeline_runtime(row)
    if how and (_int(row, "pp") or 1) > 1:
        inferred["pipeline_runtime"] = how
    microbatches, how = infer_microbatches(row, runtime)
    if how:
        inferred["microbatches"] = how
    variant = POWER_LIMITED if "POWER-LIMITED VARIANT" in (row.get("notes") or "") else None
    if variant:
        inferred["hardware_variant"] = "notes say POWER-LIMITED VARIANT"
    try:
        model = _model(row, dropout)
    except ValueError as exc:
        return SkippedRow(rid, f"architecture cannot be expressed: {exc}")
    known: dict[str, Any] = {}
    unknown: list[str] = []
    for key, column, parse in (
        ("tp", "tp", _int), ("pp", "pp", _int), ("cp", "cp", _int), ("ep", "ep", _int), ("vp", "vp", _int),
        ("sp", "sequence_parallel", _bool), ("zero", "zero", _int), ("mbs", "micro_batch", _int),
        ("recompute", "recompute", lambda r, k: (r.get(k) or "").strip() or None),
        ("precision", "precision", lambda r, k: (r.get(k) or "").strip() or None),
    ):
        value = parse(row, column)
        if value is None:
            if key in ("cp", "ep"):
                value = 1  # the sources state these whenever they are used
            else:
                unknown.append(key)
                continue
        known[key] = value
    return MeasuredRun(
        id=rid,
        source_group=row.get("source_group") or "",
        model=model,
        gpu=row["gpu"].strip(),
        n_gpus=_int(row, "n_gpus"),
        gpus_per_node=_int(row, "gpus_per_node"),
        workload=TrainWorkload(seq_len=_int(row, "seq_len"), global_batch=global_batch),
        known=known,
        unknown=tuple(unknown),
        measured_tokens_per_s_per_gpu=_positive(row, "measured_tokens_per_s_per_gpu"),
        measured_memory_gib_per_gpu=_positive(row, "measured_memory_gib_per_gpu"),
        notes=row.get("notes") or "",
        source=row.get("source") or "",
        attention_kernel=kernel,
        hardware_variant=variant,
        zero3_collectives=granularity,
        pipeline_runtime=runtime,
        microbatches=microbatches,
        inferred=inferred,
    )


def read_runs(path: Path) -> list[MeasuredRun | SkippedRow]:
    """Every row of a training-runs CSV: a :class:`MeasuredRun`, or a :class:`SkippedRow` with the reason."""
    table = read_table(Path(path), required=REQUIRED_COLUMNS, schema="docs/validation.md")
    return parse_rows(table, parse_row, lambda row, reason: SkippedRow(row["id"], reason))


def preferred_candidates(run: MeasuredRun, plans: list[Plan]) -> list[int]:
    """Indices of the candidates consistent with the row's framework defaults (all if none are known).

    The micro-batch count (``run.microbatches``: a number, or ``stages`` = pp x vp) and, on
    torchtitan's runtime, one or two stages per rank when ``vp`` is empty.
    """
    out = list(range(len(plans)))
    if run.pipeline_runtime == "torch" and "vp" in run.unknown:
        # torchtitan's defaults: 1F1B (one stage per rank), or two stages per rank for an
        # interleaved schedule without explicit split points (generate_split_points).
        out = [i for i in out if plans[i].vp in (1, 2)] or out
    if run.microbatches is not None:
        matching = []
        for i in out:
            plan = plans[i]
            m = run.workload.global_batch / (plan.dp * plan.mbs)
            want = plan.pp * plan.vp if run.microbatches == "stages" else run.microbatches
            if abs(m - want) < 1e-9:
                matching.append(i)
        out = matching or out
    return out


def candidate_plans(run: MeasuredRun, precisions_supported: tuple[str, ...]) -> list[Plan]:
    """Every plan the row could describe: its stated fields, and each possible value of the empty ones."""
    tp, pp, cp = run.known["tp"], run.known["pp"], run.known.get("cp", 1)
    dp = run.n_gpus // (tp * pp * cp)
    options: dict[str, list[Any]] = {}
    for key in run.unknown:
        if key == "sp":
            options[key] = [False, True] if tp > 1 else [False]
        elif key == "vp":
            # Megatron-LM needs the layers to split evenly over the pp x vp stages; torchtitan's
            # runtime splits them unevenly when they do not (generate_split_points).
            even = run.pipeline_runtime != "torch"
            options[key] = [1] if pp == 1 else [v for v in (1, 2, 3, 4, 6, 8) if (
                run.model.n_layers % (pp * v) == 0 if even else run.model.n_layers >= pp * v)] or [1]
        elif key == "zero":
            options[key] = [0, 1]
        elif key == "mbs":
            per_replica = run.workload.global_batch // max(dp, 1)
            options[key] = [b for b in (1, 2, 4, 8, 16) if per_replica % b == 0] or [1]
        elif key == "recompute":
            options[key] = ["none", "selective", "full"]
        elif key == "precision":
            options[key] = [p for p in ("bf16",) if p in precisions_supported]
    plans = []
    keys = list(options)
    for combo in itertools.product(*(options[k] for k in keys)):
        fields = {**run.known, **dict(zip(keys, combo))}
        if fields["precision"] == "fp16":
            fields["precision"] = "bf16"  # same tensor-core rate; bf16 stands for 16-bit training
        fields.setdefault("sp", False)
        if fields["tp"] == 1:
            fields["sp"] = False
        if fields["pp"] == 1:
            fields["vp"] = 1
        try:
            plans.append(Plan(n_gpus=run.n_gpus, **fields))
        except ValueError:
            continue
    return plans
