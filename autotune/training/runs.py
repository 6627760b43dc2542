"""Measured training runs in the schema of ``training_runs.csv`` (see docs/validation.md).

Each row names a model's architecture, a GPU type and count, the layout and
settings, the training software (``framework``, ``framework_version``) and a
measured throughput.  A row is predicted from exactly what its user could state
to ``autotune predict``: nothing is read from ``source``, ``source_group``,
``notes`` or a publication year (``source_group`` only groups rows in reports and
cross-validation).  A setting the row leaves empty is never filled silently:
:func:`candidate_plans` returns every value it could have taken, and validation
reports the range of predictions over them.
"""

from __future__ import annotations

import dataclasses
import itertools
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..inputs.hf_config import MAX_POSITIONS
from ..inputs.framework import Framework, framework_for_run
from ..inputs.request import moe_workload_problem
from ..inputs.hardware import Cluster, Hardware
from ..inputs.measured_runs import layout_reason, number, parse_rows, read_table
from ..inputs.modelspec import ModelSpec, MoESpec, load_model
from ..inputs.workload import TrainWorkload, capacity_factor_problem
from .plan import CATEGORIES, EMBEDDING_AND_LOSS_STAGES, Plan


def microbatches_of(row: dict, framework: Framework) -> tuple[int | str | None, str | None]:
    """Micro-batches per step per pipeline for a row that leaves ``micro_batch`` empty, if known.

    An ``n_microbatches`` column (a number, or ``stages``) wins.  Otherwise the framework's default
    when the micro-batch size is not given (``default_microbatches``: torchtitan 2024 splits the
    local batch into as many micro-batches as pipeline stages), for pipeline-parallel rows.
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
    if framework.default_microbatches == "stages" and pp and pp > 1:
        return "stages", f"{framework.label} default: as many micro-batches as pipeline stages (pp x vp)"
    return None, None


REQUIRED_COLUMNS = (
    "id", "n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "vocab_size", "seq_len", "gpu", "n_gpus",
    "tp", "pp", "measured_tokens_per_s_per_gpu",
)
# Not needed where a row names its architecture with an hf_config cell instead.
ARCHITECTURE_COLUMNS = ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "vocab_size")


# Columns that hold a size or a parallel degree: a whole number >= 1 when the row gives one.
SIZE_COLUMNS = ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "head_dim", "vocab_size",
                "seq_len", "n_gpus", "gpus_per_node", "tp", "pp", "dp", "cp", "ep", "vp", "micro_batch",
                "global_batch", "moe_topk", "moe_ffn_hidden_size")


# Measurements a row may record besides throughput: percentages of a peak are at most 100, the others >= 0.
CHECKED_MEASUREMENTS: dict[str, float | None] = {"measured_mfu_pct": 100.0, "measured_hfu_pct": 100.0,
                                                 "measured_tflops_per_gpu": None, "measured_iteration_time_s": None,
                                                 "measured_memory_gib_per_gpu": None}


# Every column the training-runs schema reads (docs/validation.md), besides provenance it keeps but never reads.
OPTIONAL_COLUMNS = ("framework", "framework_version", "hf_config", "n_kv_heads", "head_dim", "activation",
                    "tied_embeddings", "moe_experts", "moe_topk", "moe_ffn_hidden_size", "moe_shared_experts",
                    "moe_capacity_factor", "gpus_per_node", "dp", "cp", "ep", "vp", "etp", "schedule",
                    "sequence_parallel", "zero", "recompute", "precision", "micro_batch", "global_batch", "usable",
                    "n_microbatches", "dropout")
PROVENANCE_COLUMNS = ("source_group", "source", "model_name", "notes", "throughput_derivation", "flops_counting")
KNOWN_COLUMNS = frozenset((*REQUIRED_COLUMNS, *OPTIONAL_COLUMNS, *PROVENANCE_COLUMNS, *CHECKED_MEASUREMENTS))


def unread_columns(columns) -> list[str]:
    """What to say of columns the schema does not read: a misspelled ``measured_memory_gib`` would drop the memory
    comparison without a word (each with the known column it most likely means, where one is close)."""
    import difflib

    out = []
    for name in columns:
        if name in KNOWN_COLUMNS:
            continue
        close = difflib.get_close_matches(name, sorted(KNOWN_COLUMNS), n=1, cutoff=0.75)
        out.append(f"{name!r} (did you mean {close[0]!r}?)" if close else repr(name))
    return out


@dataclass(frozen=True)
class MeasuredRun:
    """One usable row: everything needed to predict it, and what was measured.

    ``source_group`` is kept to group rows in reports and cross-validation, never as a model input.
    """

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
    framework: Framework
    microbatches: int | str | None = None  # per step per pipeline when micro_batch is empty: a number, "stages" or unknown
    inferred: dict[str, str] = field(default_factory=dict)  # field -> which default filled it (framework defaults)
    source: str = ""  # the CSV the row came from, for errors that need its GPU's profile (validation.prepare)

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


def _workload(row: dict, global_batch: int | None) -> TrainWorkload:
    """Sequence and batch, and a mixture of experts' token dropping (a ``moe_capacity_factor`` cell; empty:
    dropless, as Megatron-Core and torchtitan run by default)."""
    capacity = _float(row, "moe_capacity_factor")
    problem = capacity_factor_problem(capacity)
    if problem:
        raise InputError(f"row {row.get('id')!r}: {problem}", field="moe_capacity_factor")
    return TrainWorkload(seq_len=_int(row, "seq_len"), global_batch=global_batch, moe_capacity_factor=capacity)


MIN_MEASUREMENT = 1e-3  # tokens/s, GiB or ms: below it a value is a unit slip or a typo, and its relative error absurd


def _positive(row: dict, key: str) -> float | None:
    """A measurement: empty, or a number of at least MIN_MEASUREMENT (a zero, negative or vanishing one cannot be
    compared with)."""
    value = _float(row, key)
    if value is not None and value < MIN_MEASUREMENT:
        raise InputError(f"row {row.get('id')!r}: a measurement must be at least {MIN_MEASUREMENT:g}, but got "
                         f"{value!r}; check the unit", field=key)
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


def _choice(row: dict, key: str, categories: tuple[str, ...]) -> str | None:
    """A cell naming one of ``categories`` (a plan setting): None when empty, else one of them, or an
    :class:`InputError` naming the row, the column and the value."""
    value = (row.get(key) or "").strip()
    if not value:
        return None
    if value not in categories:
        raise InputError(f"row {row.get('id')!r}: must be one of {', '.join(categories)} (or empty: unknown), but got "
                         f"{value!r}", field=key)
    return value


def _model(row: dict, dropout: bool) -> ModelSpec:
    n_heads = _int(row, "n_heads")
    hidden = _int(row, "hidden_size")
    experts = _int(row, "moe_experts")
    moe = None
    if experts:
        shared = _int(row, "moe_shared_experts") or 0
        expert_ffn = _int(row, "moe_ffn_hidden_size") or _int(row, "ffn_hidden_size")
        moe = MoESpec(n_experts=experts, top_k=_int(row, "moe_topk"), expert_ffn_hidden_size=expert_ffn,
                      n_shared_experts=shared, shared_expert_ffn_hidden_size=shared * expert_ffn)
    head_dim = _int(row, "head_dim")
    if not head_dim and n_heads and hidden and hidden % n_heads:
        # a spec file is refused the same way: the head size is not rounded down to a model nobody trained
        raise InputError(f"row {row.get('id')!r}: hidden_size/n_heads is not whole ({hidden}/{n_heads}); give the "
                         "row's head_dim (a head_dim column), or check n_heads", field="head_dim")
    head_dim = head_dim or hidden // n_heads
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


def _model_from_hf_config(row: dict, dropout: bool) -> ModelSpec:
    """The architecture of a row that names it with an ``hf_config`` cell: a Hugging Face config.json
    (absolute, or relative to the CSV's folder: :func:`read_runs` resolves it), used instead of the
    architecture columns.  A file that cannot be read or converted is an error naming the row."""
    cell = row["hf_config"].strip()
    try:
        spec = load_model(cell)
    except InputError as exc:
        raise InputError(f"row {row.get('id')!r}: {exc}", field="hf_config") from None
    return dataclasses.replace(spec, name=row.get("model_name") or spec.name, dropout=dropout)


def parse_row(row: dict, profiles: dict | None = None) -> MeasuredRun | SkippedRow:
    """One CSV row as a run to predict (or the reason it is skipped); ``profiles`` caches framework profiles."""
    rid = row["id"]
    if _bool(row, "usable") is False:  # true/false (1/0, yes/no); empty: usable
        return SkippedRow(rid, "marked unusable in the file: " + (row.get("notes") or "").split(";")[0][:120])
    hf_config = (row.get("hf_config") or "").strip()
    missing = [k for k in REQUIRED_COLUMNS if not (row.get(k) or "").strip()
               and not (hf_config and k in ARCHITECTURE_COLUMNS)]
    if missing:
        return SkippedRow(rid, f"no value for {', '.join(missing)}")
    for key in SIZE_COLUMNS:  # sizes and parallel degrees: whole numbers >= 1 when given
        number(row, key, whole=True, minimum=1)
    number(row, "seq_len", whole=True, maximum=MAX_POSITIONS)  # longer than any model's context: a typo
    number(row, "zero", whole=True, minimum=0, maximum=3)  # ZeRO stages 0-3 (DeepSpeed; Megatron's distributed optimizer: 1)
    for key, top in CHECKED_MEASUREMENTS.items():  # not compared with, but a damaged cell says the row is damaged
        number(row, key, minimum=0, maximum=top)
    experts = None if hf_config else _int(row, "moe_experts")
    if experts and _int(row, "moe_topk") is None:  # the experts each token runs set the MoE's FLOPs: not guessed
        return SkippedRow(rid, f"no value for moe_topk (the row has moe_experts={experts})")
    layout = layout_reason(_int(row, "n_gpus"), [(k, _int(row, k)) for k in ("tp", "pp", "cp")], _int(row, "dp"))
    if layout:
        return SkippedRow(rid, layout)
    global_batch = _int(row, "global_batch")
    if global_batch is None:
        return SkippedRow(rid, "no global_batch: the number of micro-batches (and so the bubble) is unknown")
    inferred: dict[str, str] = {}
    try:
        framework = framework_for_run(row.get("framework"), row.get("framework_version"), profiles)
    except InputError as exc:  # it names --framework (or the profile): name the row and the column instead
        column = exc.field if exc.field == "framework_version" else "framework"
        raise InputError(f"row {rid!r}: {exc.message}", field=column) from None
    # Dropout: a `dropout` column wins; otherwise the framework's default (Megatron-LM's arguments
    # default to 0.1 attention and hidden dropout; current LLM recipes train without).
    dropout = _bool(row, "dropout")
    if dropout is None:
        dropout = framework.dropout
        inferred["dropout"] = f"{str(dropout).lower()}: {framework.label} default"
    microbatches, how = microbatches_of(row, framework)
    if how:
        inferred["microbatches"] = how
    if hf_config:
        model = _model_from_hf_config(row, dropout)
    else:
        try:
            model = _model(row, dropout)
        except InputError:
            raise  # a cell that is not a number (or true/false): an error of the file, naming the row and column
        except ValueError as exc:
            return SkippedRow(rid, f"architecture cannot be expressed: {exc}")
    known: dict[str, Any] = {}
    unknown: list[str] = []
    for key, column, parse in (
        ("tp", "tp", _int), ("pp", "pp", _int), ("cp", "cp", _int), ("ep", "ep", _int), ("vp", "vp", _int),
        ("sp", "sequence_parallel", _bool), ("zero", "zero", _int), ("mbs", "micro_batch", _int),
        ("recompute", "recompute", lambda r, k: _choice(r, k, CATEGORIES["recompute"])),
        ("precision", "precision", lambda r, k: _choice(r, k, CATEGORIES["precision"])),
        ("etp", "etp", _int),
        ("schedule", "schedule", lambda r, k: _choice(r, k, CATEGORIES["schedule"])),
    ):
        value = parse(row, column)
        if value is None:
            if key in ("cp", "ep"):
                value = 1  # the sources state these whenever they are used
            elif key == "etp":
                # Expert TP: fixed by the framework where it cannot set it apart; otherwise unknown
                # when it could differ from tp (an MoE model with tp > 1), else equal to tp.
                tp = known.get("tp")
                if model.moe is None or framework.expert_tp == "equal_tp" or tp in (None, 1):
                    value = 1 if (framework.expert_tp == "none" and model.moe is not None) else None
                    if value is None:
                        continue  # Plan fills etp = tp
                elif framework.expert_tp == "none":
                    value = 1
                else:
                    unknown.append(key)
                    continue
            elif key == "schedule":
                # Every profiled framework but the generic `other` offers 1F1B (interleaved) only; a
                # DualPipe run names its schedule.
                if "dualpipe" in framework.pipeline_schedules and (known.get("pp") or 1) > 1:
                    unknown.append(key)
                    continue
                value = "1f1b"
            else:
                unknown.append(key)
                continue
        known[key] = value
    workload = _workload(row, global_batch)
    problem = moe_workload_problem(model, framework, workload)
    if problem:
        raise InputError(f"row {rid!r}: {problem}", field="moe_capacity_factor")
    return MeasuredRun(
        id=rid,
        source_group=row.get("source_group") or "",
        model=model,
        gpu=row["gpu"].strip(),
        n_gpus=_int(row, "n_gpus"),
        gpus_per_node=_int(row, "gpus_per_node"),
        workload=workload,
        known=known,
        unknown=tuple(unknown),
        measured_tokens_per_s_per_gpu=_positive(row, "measured_tokens_per_s_per_gpu"),
        measured_memory_gib_per_gpu=_positive(row, "measured_memory_gib_per_gpu"),
        framework=framework,
        microbatches=microbatches,
        inferred=inferred,
    )


def read_runs(path: Path) -> list[MeasuredRun | SkippedRow]:
    """Every row of a training-runs CSV: a :class:`MeasuredRun`, or a :class:`SkippedRow` with the reason.

    A row may name its architecture with an ``hf_config`` cell (a config.json, relative to the CSV's folder
    or absolute) instead of the architecture columns."""
    path = Path(path)
    table = read_table(path, required=[c for c in REQUIRED_COLUMNS if c not in ARCHITECTURE_COLUMNS],
                       schema="docs/validation.md")
    if "hf_config" not in table.columns:
        absent = [c for c in ARCHITECTURE_COLUMNS if c not in table.columns]
        if absent:
            raise InputError(f"missing column(s) {', '.join(absent)} (or an hf_config column); see "
                             "docs/validation.md for the schema", source=table.source)
    profiles: dict = {}

    def parse(row: dict) -> MeasuredRun | SkippedRow:
        cell = (row.get("hf_config") or "").strip()
        if cell and not Path(cell).is_absolute():
            row = {**row, "hf_config": str(path.parent / cell)}  # relative to the CSV, not the working folder
        run = parse_row(row, profiles)
        return dataclasses.replace(run, source=table.source) if isinstance(run, MeasuredRun) else run

    return parse_rows(table, parse, lambda row, reason: SkippedRow(row["id"], reason))


def preferred_candidates(run: MeasuredRun, plans: list[Plan]) -> list[int]:
    """Indices of the candidates consistent with the row's framework defaults (all if none are known).

    The micro-batch count (``run.microbatches``: a number, or ``stages`` = pp x vp) and, on
    torchtitan's runtime, one or two stages per rank when ``vp`` is empty.
    """
    out = list(range(len(plans)))
    if run.framework.pipeline_runtime == "torch" and "vp" in run.unknown:
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
            # Megatron-LM needs the layers to split evenly over the pp x vp stages (before its uneven
            # first/last stage options, which may also give the embedding and the loss a stage each: space rule 5);
            # torchtitan splits them unevenly (generate_split_points).
            even = not run.framework.uneven_stages
            interleaved = "interleaved" in run.framework.pipeline_schedules
            options[key] = [1] if pp == 1 or not interleaved else [v for v in (1, 2, 3, 4, 6, 8) if (
                run.model.n_layers % (pp * v) == 0 if even
                else run.model.n_layers + EMBEDDING_AND_LOSS_STAGES >= pp * v)] or [1]
        elif key == "zero":
            # The stages the framework offers up to ZeRO-1 (what an unstated setting most likely was).
            stages = run.framework.zero_stages_with_pp if pp > 1 else run.framework.zero_stages
            options[key] = [z for z in stages if z <= 1] or list(stages) or [0]
        elif key == "mbs":
            per_replica = run.workload.global_batch // max(dp, 1)
            options[key] = [b for b in (1, 2, 4, 8, 16) if per_replica % b == 0] or [1]
        elif key == "recompute":
            options[key] = ["none", "full"] + (["selective"] if run.framework.selective_recompute != "none" else [])
        elif key == "precision":
            options[key] = [p for p in ("bf16",) if p in precisions_supported]
        elif key == "etp":
            options[key] = [tp, 1]
        elif key == "schedule":
            options[key] = ["1f1b", "dualpipe"]
    plans = []
    keys = list(options)
    for combo in itertools.product(*(options[k] for k in keys)):
        fields = {**run.known, **dict(zip(keys, combo))}
        if fields["precision"] == "fp16" and "fp16" not in precisions_supported:
            # same tensor-core rate; bf16 stands for 16-bit training where the GPU's profile gives no fp16 peak.  Where
            # it does, the row keeps fp16: Megatron keeps an fp16 run's gradients in fp16 (fp16_grads_in_fp16), which
            # changes its memory and its gradient reduction, so predicting it as bf16 would not be the run
            fields["precision"] = "bf16"
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
