"""Measured serving operating points in the schema of ``serving_silicon.csv`` (TTFT and TPOT per point).

The schema (NVIDIA AIConfigurator's accuracy sample as converted in the shared data,
``serving_silicon.md``): one row is a fixed deployment (``hf_model_id``, ``gpu``, ``engine``,
``mode`` agg or disagg, its layout) driven by a closed loop of ``concurrency`` clients at nominal
``input_len`` / ``output_len``, with the measured ``ttft_ms`` and ``tpot_ms``.

Reading rules (each one is stated where it acts):

* Only unique measurements count: a row with ``duplicate_primary`` false is a copy of another and is
  skipped (and said so).  So is a rounded copy the file's own duplicate sets miss (they match TTFT and TPOT to
  1e-4 ms): a row of the same deployment, lengths and concurrency whose TTFT and TPOT both equal another row's
  to the rounding of the shorter export (0.005 ms; the AIC gap-analysis files keep two decimals, e.g. 338.34
  against the database's 338.336): the more precise row is kept (``_skip_rounded_copies``).
* A row whose deployment is not known is skipped with its reason: disagg rows without worker counts
  (``disagg_workers_missing``), rows whose replica count or attention-DP width is unknown
  (``batch_concurrency_mismatch``), MoE splits that contradict the GPU count (``moe_layout_inconsistent``),
  a model id the catalogue does not know, a GPU without a profile, missing lengths or measurements.
* The load of one replica (the model predicts one): ``concurrency_per_replica``, else ``concurrency`` over the
  replicas the row states (``replicas``, or ``n_gpus`` over the layout's GPUs), else ``concurrency``.  A row whose
  ``gpus_per_replica``, ``n_gpus``, ``replicas`` and ``concurrency_per_replica`` contradict its layout or each other
  is skipped with the contradiction (``_replica_counts``).
* ``attention_dp`` empty or 0 reads as 1; ``moe_tp``/``moe_ep`` empty: the MoE layer is split like the
  attention.  Empty ``tp``/``pp`` read as 1.  A MoE layout whose ``tp`` does not divide the attention heads
  or exceeds a node is AIC's lossy encoding of attention DP + expert parallelism (DEP; e.g. ``tp 72`` on GB200 for DeepSeek): read
  as ``dp = tp, tp = 1, ep = GPUs``.
* A non-empty cell that cannot be what its column says (a width of 0 where 0 does not mean "not set", a
  negative or fractional width or concurrency, a word, NaN, ``1,234.5``, a width beyond 1 million, a length or
  concurrency beyond 10 million, a latency outside 0.001 ms to 1e8 ms) is an error of the file (:class:`InputError`, exit
  2) naming the file, the row (id and line), the column and the value, as the training and serving-runs
  readers refuse theirs; it is never read as a default, truncated or skipped.  Every number cell of the schema
  is checked in every row, whatever else would skip the row.  "Not recorded" (a skip) is said of empty cells
  only.
* A row with more non-empty cells than the header is an error naming its line (missing trailing cells read as
  empty, as in the other readers); so is a header without data rows, or one that lacks a column the rows are
  read from (``SILICON_REQUIRED_COLUMNS``; ``tp`` when the file has an agg row, the pools' worker counts and
  ``tp`` when it has a disagg row): such a column is never read as empty cells.  Columns whose empty cell has a
  stated meaning (pp, attention DP, the MoE split, moe_precision, concurrency_per_replica) may be left out.
* Weight formats: ``weight_precision`` for attention and dense layers, ``moe_precision`` for routed
  experts (``arch.class_formats``); an ``fp4`` label on a checkpoint the catalogue knows as MXFP4
  (gpt-oss) is MXFP4, an ``int4`` on a compressed-tensors INT4 checkpoint (Kimi-K2.5) has group 32.
* KV-cache dtype: ``kv_cache_dtype`` where a row states it (fp8, or bf16/fp16); another one (int8, nvfp4) skips
  the row with the reason; empty (every bundled row) or ``auto``: fp8 for quantised checkpoints, bf16 for bf16
  ones (the InferenceX launch scripts behind the rows pass ``--kv-cache-dtype fp8`` with quantised checkpoints).
* Engine: the ``engine`` column (vllm, sglang, trtllm; also tensorrt-llm, trt-llm, and NAME@VERSION, read by
  ``engines.split_engine_cell`` as the serving-runs reader reads it; ``vllm@`` or ``@1.0`` is an error of the file);
  releases are not distinguished (1,838 rows have none; all are late-2025 to spring-2026 builds).  ``mode`` also reads
  aggregated / disaggregated.  Weight labels also read the torch dtype names and AIConfigurator's quant modes
  (``fp8_block``, ``int4_wo``, ``w4a16_mxfp4``).  A model id reads in any case, with a revision or as the
  repository's address (``catalogue.hf_id_parts``; two revisions, ``org/name@a@b``, or an empty one is an error of
  the file), and a row keeps the catalogue's id (``catalogue.canonical_hf_id``), not the cell; a GPU in the
  spellings ``resolve_hardware_name`` reads.
"""

from __future__ import annotations

import csv
import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import InputError
from ..inputs.catalogue import canonical_hf_id, catalogue, hf_id_problem, lookup_hf_id
from ..inputs.hardware import Hardware, load_hardware, resolve_hardware_name, unknown_hardware_reason
from ..inputs.loading import check_regular_file
from ..inputs.modelspec import ModelSpec, load_model
from . import engines as E
from .arch import KV_BYTES, gpu_scalars, model_scalars, precision_arrays
from .engines import ENGINES, MAX_LENGTH
from .plausibility import below_floor, tpot_floor_ms, ttft_floor_ms

SILICON_MARKER_COLUMNS = frozenset({"hf_model_id", "engine", "mode", "ttft_ms", "tpot_ms", "concurrency"})
# Columns every row is read from (its model, GPU, engine, formats, lengths, load and measurements): a file without
# one is refused, never read as if the column's cells were empty.  The layout columns are required by the mode of
# the rows that read them (an agg-only file need not carry the disagg columns, and the other way round).
SILICON_REQUIRED_COLUMNS = ("id", "hf_model_id", "engine", "gpu", "mode", "input_len", "output_len", "concurrency",
                            "weight_precision", "ttft_ms", "tpot_ms")
# The widths every row of a mode is read from; the others (pp, attention DP, the MoE split, moe_precision,
# concurrency_per_replica) have a stated meaning when empty (1, none, the dense split, the weights' format,
# one replica), so a file may leave those columns out.
AGG_LAYOUT_COLUMNS = ("tp",)
DISAGG_LAYOUT_COLUMNS = tuple(f"{side}_{c}" for side in ("prefill", "decode") for c in ("workers", "tp"))
LAYOUT_COLUMNS = {"agg": AGG_LAYOUT_COLUMNS, "disagg": DISAGG_LAYOUT_COLUMNS}
# Columns only this schema has (serving_runs.csv has none of them): a header with two of them is meant to be a
# silicon file even when a required column is missing, so the error names the silicon columns that are missing
# rather than those of the other schema.
SILICON_ONLY_COLUMNS = frozenset({"mode", "concurrency", "concurrency_per_replica", "ttft_ms", "tpot_ms",
                                  "moe_precision", "moe_tp", "moe_ep", "prefill_workers", "decode_workers",
                                  "quality_flags", "duplicate_primary"})
# Why a row whose deployment the engine's default memory budget cannot serve is skipped: the row does not
# record the memory fraction it ran with, and a prediction uses only what a user states (the default).
NO_DEFAULT_BUDGET = ("under {engine}'s default memory budget the weights leave no room for one sequence of "
                     "{tokens:,} tokens on the {side} engine; the row does not record the memory fraction it ran with")

# Physically generous bounds: a value beyond them is a typo or an overflow, not a measurement.
MAX_CONCURRENCY = 10_000_000  # requests in flight
MIN_LATENCY_MS, MAX_LATENCY_MS = 0.001, 1e8  # 1 us to ~28 hours
MAX_PARALLEL = 1_000_000  # GPUs, workers or ranks of one dimension
OR_EMPTY = ", or empty where the source does not say"  # the fix for a bad cell whose empty value is "not recorded"
UNKNOWN_DEPLOYMENT_FLAGS = {
    "disagg_workers_missing": "disagg worker counts not recorded (the per-stage layout is lossy)",
    "batch_concurrency_mismatch": "replica count or attention-DP width not recorded (concurrency != batch x attention DP)",
    "moe_layout_inconsistent": "MoE split contradicts the GPU count (moe_tp x moe_ep != tp x attention_dp)",
    # the load is an input like the layout: a concurrency rebuilt from AIC's batch convention is not the benchmark's
    "concurrency_derived": "concurrency not recorded (concurrency_derived: rebuilt from AIC's batch convention)",
}
PRECISION_LABELS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "mxfp4",
                    "int4": "int4", "int8": "int8",
                    # the torch dtype names, and AIConfigurator's own quant modes (aic_gemm_quant_mode,
                    # aic_moe_quant_mode; serving_silicon.md maps them to the labels above)
                    "bfloat16": "bf16", "float16": "bf16", "float8_e4m3fn": "fp8", "fp8_e4m3": "fp8",
                    "fp8_block": "fp8", "int4_wo": "int4", "w4a16": "int4", "w4a16_mxfp4": "mxfp4"}
# Other names of the engines and modes (the engine's release, NAME@VERSION, is not distinguished: module docstring)
MODE_ALIASES = {"aggregated": "agg", "disaggregated": "disagg"}


def is_silicon_schema(columns) -> bool:
    """Whether a header is meant to be this schema (it may still lack a required column; the reader says which)."""
    from .runs import REQUIRED_COLUMNS as RUNS_REQUIRED

    names = set(columns)
    if SILICON_MARKER_COLUMNS <= names:
        return True
    return len(SILICON_ONLY_COLUMNS & names) >= 2 and not set(RUNS_REQUIRED) <= names


@dataclass(frozen=True)
class Pool:
    workers: int
    tp: int
    pp: int
    dp: int
    ep: int


@dataclass(frozen=True)
class SiliconRow:
    id: str
    engine: str
    mode: str
    hf_model_id: str  # the catalogue's id of the model (catalogue.canonical_hf_id), whatever the cell's spelling
    model: ModelSpec
    gpu: str  # bundled profile name
    hardware: Hardware
    prefill: Pool
    decode: Pool  # agg: the engine (prefill is the same engine)
    formats: tuple[str, str, str]  # attention, dense MLP, routed experts
    kv: str
    input_len: int
    output_len: int
    concurrency: float  # per replica
    measured_ttft_ms: float
    measured_tpot_ms: float
    layout_note: str = ""


@dataclass(frozen=True)
class SkippedRow:
    id: str
    engine: str
    mode: str
    reason: str
    # a cell of the file is nonsense: no longer a skip (read_silicon_rows refuses such a file), kept False for the
    # readers of the report's JSON
    bad_input: bool = False


class _BadCell(ValueError):
    """A non-empty cell whose value cannot be a measurement, a length, a load or a layout: the readers turn it
    into an :class:`InputError` naming the row and the column."""

    def __init__(self, column: str, text: str, what: str):
        self.column = column
        super().__init__(f"must be {what}, but got {text!r}")


# A plain decimal number (``8``, ``2.5``, ``1e3``): not ``1,234.5``, ``1_000``, ``nan``, ``inf`` or other digits.
_PLAIN_NUMBER = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")


def _cell(row: dict, key: str) -> str:
    return (row.get(key) or "").strip()


def _float(text: str) -> float:
    """The value of a plain decimal number, NaN for anything else (which no bound accepts)."""
    return float(text) if _PLAIN_NUMBER.fullmatch(text) else math.nan


def _whole(row: dict, key: str, lo: int, hi: int, what: str) -> int | None:
    """A whole number in [lo, hi], None for an empty cell; anything else is a bad cell naming the column."""
    text = _cell(row, key)
    if not text:
        return None
    value = _float(text)
    if not (math.isfinite(value) and value == int(value) and lo <= value <= hi):
        raise _BadCell(key, text, what)
    return int(value)


def _length(row: dict, key: str) -> int | None:
    return _whole(row, key, 1, MAX_LENGTH,
                  f"a whole number of tokens from 1 to {MAX_LENGTH:,}{OR_EMPTY}")


def _concurrency(row: dict, key: str) -> float | None:
    # whole, as the benchmark's clients are (and the serving-runs reader's concurrency_or_batch): 2.5 is a typo or
    # an average, not a load the model can be checked at
    value = _whole(row, key, 1, MAX_CONCURRENCY,
                   f"a whole number of requests in flight from 1 to {MAX_CONCURRENCY:,}{OR_EMPTY}")
    return None if value is None else float(value)


def _latency(row: dict, key: str) -> float | None:
    text = _cell(row, key)
    if not text:
        return None
    value = _float(text)
    if not (math.isfinite(value) and MIN_LATENCY_MS < value < MAX_LATENCY_MS):
        raise _BadCell(key, text, f"a plain number of milliseconds above {MIN_LATENCY_MS:g} and below "
                       f"{MAX_LATENCY_MS:g}{OR_EMPTY}")
    return value


def _parallel(row: dict, key: str, *, zero_unset: bool = False) -> int:
    """A layout width; empty reads as 1 (and 0 too where AIC writes 0 for "not set": attention_dp, moe_tp,
    moe_ep, 835 rows of the data).  A negative, fractional or non-numeric width is a bad cell, not a 1."""
    text = _cell(row, key)
    if zero_unset and text and _float(text) == 0:
        return 1
    hint = " (0 or empty: not set)" if zero_unset else " (empty: 1)"
    value = _whole(row, key, 1, MAX_PARALLEL, f"a positive integer up to {MAX_PARALLEL:,}{hint}")
    return 1 if value is None else value


def _count(row: dict, key: str) -> int | None:
    """A GPU, replica or worker count: empty is not recorded (a disagg row without worker counts is skipped)."""
    return _whole(row, key, 1, MAX_PARALLEL, f"a positive integer up to {MAX_PARALLEL:,}{OR_EMPTY}")


def _batch(row: dict, key: str) -> int | None:
    return _whole(row, key, 1, MAX_CONCURRENCY,
                  f"a whole number of sequences from 1 to {MAX_CONCURRENCY:,}{OR_EMPTY}")


def _kv_dtype(row: dict) -> str | None:
    """The KV-cache dtype a row states (none in the bundled data): ``fp8`` (fp8_e4m3, float8_e4m3fn), ``bf16``
    (bf16, fp16, half); None for an empty cell or ``auto`` (which follows the checkpoint: the rule of an empty cell);
    ``other:<text>`` for a cache autotune does not plan (int8, nvfp4: engines run them, so the row is skipped with
    the reason, not the file refused)."""
    text = _cell(row, "kv_cache_dtype").lower()
    if not text or text == "auto":
        return None
    if text.startswith(("fp8", "float8")):
        return "fp8"
    if text.startswith(("bf16", "fp16", "bfloat16", "float16", "half")):
        return "bf16"
    return f"other:{_cell(row, 'kv_cache_dtype')}"


# Every number cell of the schema and what it must hold when not empty.  Each is checked in every row (before
# any reason to skip the row), so that whether a file is accepted does not depend on the order of the skips.
CELL_CHECKS: dict[str, Callable[[dict, str], object]] = {
    "input_len": _length, "output_len": _length, "concurrency": _concurrency, "concurrency_per_replica": _concurrency,
    "ttft_ms": _latency, "tpot_ms": _latency, "n_gpus": _count, "replicas": _count, "gpus_per_replica": _count,
    **{f"{prefix}{c}": _parallel for prefix in ("", "prefill_", "decode_") for c in ("tp", "pp")},
    **{f"{prefix}{c}": (lambda row, key: _parallel(row, key, zero_unset=True))
       for prefix in ("", "prefill_", "decode_") for c in ("attention_dp", "moe_tp", "moe_ep")},
    **{f"{side}_workers": _count for side in ("prefill", "decode")},
    **{f"{side}_batch": _batch for side in ("prefill", "decode")},
}


def _check_cells(row: dict) -> None:
    """Raise :class:`_BadCell` for the first number cell (in the header's order) that is not empty and not what
    its column says."""
    for key in row:
        check = CELL_CHECKS.get(key) if key is not None else None
        if check is not None:
            check(row, key)


def _where(rid: str, line: int | None = None) -> str:
    who = f"row {rid!r}" if rid else "a row without an id"
    return f"{who} (line {line})" if line else who


def _cell_error(exc: _BadCell, rid: str, line: int | None = None, source: str | None = None) -> InputError:
    return InputError(f"{_where(rid, line)}: {exc}", source=source, field=exc.column)


def _pool(row: dict, prefix: str, model: ModelSpec, gpus_per_node: int) -> tuple[Pool, str]:
    tp = _parallel(row, f"{prefix}tp")
    pp = _parallel(row, f"{prefix}pp")
    dp = _parallel(row, f"{prefix}attention_dp", zero_unset=True)
    workers = _parallel(row, f"{prefix}workers") if prefix else 1
    _parallel(row, f"{prefix}moe_tp", zero_unset=True)  # not used (the split follows from tp x dp and ep): checked
    G = tp * dp
    ep = min(_parallel(row, f"{prefix}moe_ep", zero_unset=True), G)
    note = ""
    if model.is_moe and (model.n_heads % tp or tp > gpus_per_node):
        note = f"{prefix or 'agg '}tp {tp} read as attention DP {G} + EP {G} (AIC's DEP encoding)"
        tp, dp, ep = 1, G, G
    if not model.is_moe:
        ep = 1
    elif G % ep:
        ep = 1
    return Pool(workers, tp, pp, dp, ep), note


def _formats(model: ModelSpec, weight: str, moe: str, hf_id: str) -> tuple[str, str, str] | None:
    from .arch import class_formats

    w = PRECISION_LABELS.get((weight or "bf16").strip().lower())
    m = PRECISION_LABELS.get((moe or "").strip().lower()) if moe else None
    if w is None or (moe and m is None):
        return None
    entry = lookup_hf_id(hf_id)
    if entry is not None and entry.checkpoint == "mxfp4":
        w = "mxfp4" if w == "fp4" else w
        m = "mxfp4" if m == "fp4" else m
    if entry is not None and entry.checkpoint == "int4":
        w = "int4_g32" if w == "int4" else w
        m = "int4_g32" if m == "int4" else m
    return class_formats(model.is_moe, w, m)


def _layout_gpus(mode: str, prefill: Pool, decode: Pool) -> int:
    """GPUs of one replica as the row's layout takes them (serving_silicon.md, Formulas)."""
    one = lambda p: p.tp * p.pp * p.dp  # noqa: E731
    return one(decode) if mode == "agg" else prefill.workers * one(prefill) + decode.workers * one(decode)


def _replica_counts(row: dict, layout_gpus: int, total: float | None, per_replica: float | None) -> float | str:
    """The concurrency of one replica, which the model predicts, or why the row's counts contradict its layout (a
    skip: which cell is wrong is not known).  ``gpus_per_replica`` must be the layout's GPUs, ``n_gpus`` replicas
    (or, with replicas empty, a whole number of them) times that, and ``concurrency_per_replica`` the concurrency
    over the replicas.  With ``concurrency_per_replica`` empty, the concurrency is split over the replicas a
    row states (``replicas``, or ``n_gpus`` over the layout's GPUs): a total over two replicas is not the load of
    one."""
    replicas, n_gpus, per_gpus = (_count(row, k) for k in ("replicas", "n_gpus", "gpus_per_replica"))
    if per_gpus is not None and per_gpus != layout_gpus:
        return (f"gpus_per_replica {per_gpus} is not the {layout_gpus} GPUs the row's layout takes; the row "
                "contradicts itself")
    if n_gpus is not None:
        if replicas is not None and n_gpus != replicas * layout_gpus:
            return (f"n_gpus {n_gpus} is not replicas x the layout's GPUs ({replicas} x {layout_gpus}); the row "
                    "contradicts itself")
        if n_gpus % layout_gpus:
            return (f"n_gpus {n_gpus} is not a whole number of replicas of the {layout_gpus} GPUs the row's layout "
                    "takes; the row contradicts itself")
        replicas = replicas if replicas is not None else n_gpus // layout_gpus
    if per_replica is not None:
        if total is not None and replicas is not None and abs(per_replica * replicas - total) > 0.005 * replicas:
            return (f"concurrency_per_replica {per_replica:g} is not concurrency / replicas ({total:g} / {replicas}); "
                    "the row contradicts itself")
        return per_replica
    assert total is not None  # the caller skipped a row with neither
    return total / (replicas or 1)


def parse_silicon_row(row: dict, hardware_loader: Callable[[str], Hardware] = load_hardware,
                      model_loader: Callable[[str], ModelSpec] = load_model, *,
                      primary_only: bool = True, line: int | None = None,
                      source: str | None = None) -> SiliconRow | SkippedRow:
    """One row as a deployment to predict, or skipped with the reason the record does not hold it.  A non-empty
    cell that cannot be what its column says raises :class:`InputError` naming the row (its id, and ``line``
    where given), the column and the value (and the file, ``source``)."""
    rid = (row.get("id") or "").strip()
    try:  # NAME or NAME@VERSION; the release is not distinguished (module docstring)
        engine = E.split_engine_cell(row.get("engine"))[0]
    except ValueError as exc:  # "vllm@", "@1.0": which engine or release the row ran is not said
        raise InputError(f"{_where(rid, line)}: {exc}", source=source, field="engine") from None
    problem = hf_id_problem(row.get("hf_model_id") or "")
    if problem is not None:  # org/name@main@x: which revision is not said (it was read as revision "main@x")
        raise InputError(f"{_where(rid, line)}: hf_model_id must be a Hugging Face id ORG/NAME or ORG/NAME@REVISION, "
                         f"but got (hf_model_id={_cell(row, 'hf_model_id')!r}): {problem}", source=source,
                         field="hf_model_id")
    mode = (row.get("mode") or "").strip().lower()
    mode = MODE_ALIASES.get(mode, mode)

    def skip(reason: str) -> SkippedRow:
        return SkippedRow(rid, engine, mode, reason)

    try:
        _check_cells(row)
        parsed = _parse(row, rid, engine, mode, skip, hardware_loader, model_loader, primary_only)
    except _BadCell as exc:
        raise _cell_error(exc, rid, line, source) from None
    if isinstance(parsed, SiliconRow):
        slip = implausible_latency(parsed)
        if slip is not None:
            column, why = slip
            raise InputError(f"{_where(rid, line)}: {why}", source=source, field=column)
    return parsed


def latency_floors_ms(row: SiliconRow) -> tuple[float, float]:
    """(TTFT, TPOT) no deployment of ``row`` can beat, in ms (plausibility.py): on every GPU of the prefill side, and
    of the decode side (looser than one prompt's rank or one decode engine, never tighter)."""
    p, d = row.prefill, row.decode
    return (ttft_floor_ms(row.model, row.hardware, row.input_len, p.workers * p.tp * p.pp * p.dp),
            tpot_floor_ms(row.model, row.hardware, d.workers * d.tp * d.pp * d.dp))


def implausible_latency(row: SiliconRow) -> tuple[str, str] | None:
    """(column, why) where a measured latency is beyond what the hardware can do; None when both are plausible.  The
    bundled rows sit at least 1.8x (TTFT) and 2.7x (TPOT) above their floors (tests/test_bad_input_round12.py)."""
    floor_ttft_ms, floor_tpot_ms = latency_floors_ms(row)
    on = f"at the {row.hardware.name}'s peak on the row's GPUs"
    for column, value, floor_ms, what, mean in (
            ("ttft_ms", row.measured_ttft_ms, floor_ttft_ms, f"prefilling {row.input_len:,} tokens of {row.model.name} {on}",
             "time to first token"),
            ("tpot_ms", row.measured_tpot_ms, floor_tpot_ms, f"streaming {row.model.name}'s active weights once {on}",
             "time per output token")):
        why = below_floor(column, value, floor_ms, what, mean)
        if why is not None:
            return column, why
    return None


def _parse(row: dict, rid: str, engine: str, mode: str, skip: Callable[[str], SkippedRow],
           hardware_loader: Callable[[str], Hardware], model_loader: Callable[[str], ModelSpec],
           primary_only: bool) -> SiliconRow | SkippedRow:
    primary = (row.get("duplicate_primary") or "").strip().lower()
    if primary not in ("", "true", "false"):  # 'maybe' had been read as a primary measurement
        raise _BadCell("duplicate_primary", row.get("duplicate_primary"), "true, false or empty")
    if primary_only and primary == "false":
        return skip("a copy of another row's measurement (duplicate_primary false)")
    flags = set(filter(None, (row.get("quality_flags") or "").split(";")))
    for flag, why in UNKNOWN_DEPLOYMENT_FLAGS.items():
        if flag in flags:
            return skip(why)
    if engine not in ENGINES:
        return skip(f"engine {engine!r} is not one of {', '.join(ENGINES)}")
    if mode not in ("agg", "disagg"):
        return skip(f"mode {mode!r} is neither agg nor disagg")
    hf_id = (row.get("hf_model_id") or "").strip()
    entry = lookup_hf_id(hf_id) if hf_id else None
    if entry is None or entry.spec is None:
        why = entry.reason if entry is not None else "not in profiles/catalogue/hf_models.yaml"
        ids = sorted(e.hf_id for e in catalogue().values() if e.spec == hf_id.lower())
        if entry is None and ids:  # a bundled spec's name: its ids say which checkpoint (gpt-oss's MXFP4)
            why = f"a bundled spec's name, not a Hugging Face id; write the id of the checkpoint ({', '.join(ids)})"
        return skip(f"model {hf_id or '(empty)'!r}: {why}")
    try:
        model = model_loader(entry.spec)
    except InputError as exc:
        return skip(f"model {hf_id!r}: {exc}")
    gpu_label = (row.get("gpu") or "").strip()
    gpu = resolve_hardware_name(gpu_label)
    if gpu is None:
        return skip(unknown_hardware_reason(gpu_label))
    hw = hardware_loader(gpu)
    I, O = _length(row, "input_len"), _length(row, "output_len")
    if I is None or O is None:
        return skip(f"input/output lengths not recorded ({'input_len' if I is None else 'output_len'} is empty)")
    # the model predicts one replica: the per-replica figure, or the total over the replicas (_replica_counts)
    per_replica, total = _concurrency(row, "concurrency_per_replica"), _concurrency(row, "concurrency")
    if per_replica is None and total is None:
        return skip("concurrency not recorded (concurrency and concurrency_per_replica are empty)")
    ttft, tpot = _latency(row, "ttft_ms"), _latency(row, "tpot_ms")
    if ttft is None or tpot is None:
        return skip(f"{'TTFT' if ttft is None else 'TPOT'} not recorded "
                    f"({'ttft_ms' if ttft is None else 'tpot_ms'} is empty)")
    formats = _formats(model, row.get("weight_precision", ""), row.get("moe_precision", ""), hf_id)
    if formats is None:
        return skip(f"unknown precision {row.get('weight_precision')!r}/{row.get('moe_precision')!r}")
    # stated: as stated; else fp8 with a quantised checkpoint, bf16 with a bf16 one (module docstring)
    stated = _kv_dtype(row)
    if stated is not None and stated.startswith("other:"):
        return skip(f"kv_cache_dtype {stated.removeprefix('other:')!r} is a cache autotune does not plan (bf16, fp8)")
    kv = stated or ("bf16" if all(f == "bf16" for f in formats) else "fp8")
    if kv == "fp8" and not hw.supports("fp8"):
        return skip(f"an fp8 KV cache on {hw.name}, which has no fp8 support")
    node = hw.gpus_per_node if hw.gpus_per_scale_up_domain <= hw.gpus_per_node else 8
    if mode == "agg":
        engine_pool, note = _pool(row, "", model, node)
        prefill = decode = engine_pool
    else:
        if not _cell(row, "prefill_workers") or not _cell(row, "decode_workers"):
            return skip(UNKNOWN_DEPLOYMENT_FLAGS["disagg_workers_missing"])
        prefill, n1 = _pool(row, "prefill_", model, node)
        decode, n2 = _pool(row, "decode_", model, node)
        note = "; ".join(filter(None, (n1, n2)))
    per_gpu = _layout_gpus(mode, prefill, decode)
    counted = _replica_counts(row, per_gpu, total, per_replica)
    if isinstance(counted, str):
        return skip(counted)
    C = counted
    # one spelling per model (the catalogue's id, not the cell: a URL, @main or another case), so that
    # leave-one-model-out, the rounded-copy check and the report see one model, not one per spelling
    return SiliconRow(id=rid, engine=engine, mode=mode, hf_model_id=canonical_hf_id(hf_id), model=model, gpu=gpu,
                      hardware=hw, prefill=prefill, decode=decode, formats=formats, kv=kv, input_len=int(I), output_len=int(O),
                      concurrency=float(C), measured_ttft_ms=float(ttft), measured_tpot_ms=float(tpot),
                      layout_note=note)


def read_silicon_rows(path: Path, *, primary_only: bool = True) -> list[SiliconRow | SkippedRow]:
    """Every row of a silicon-schema CSV, parsed or skipped with the reason its record does not hold the deployment.
    A file that lacks a column its rows are read from, has a row with fewer or more cells than the header, or holds
    a non-empty cell that cannot be what its column says raises :class:`InputError` naming the file (and the row,
    the column and the value)."""
    source = str(path)
    check_regular_file(path, pipes=False)
    try:
        handle = open(path, newline="", encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError("file not found; check the path", source=source) from None
    hardware: dict[str, Hardware] = {}
    models: dict[str, ModelSpec] = {}

    def hw_of(name: str) -> Hardware:
        if name not in hardware:
            hardware[name] = load_hardware(name)
        return hardware[name]

    def model_of(name: str) -> ModelSpec:
        if name not in models:
            models[name] = load_model(name)
        return models[name]

    with handle:
        reader = csv.DictReader(handle)
        header = [c.strip() for c in reader.fieldnames or []]
        reader.fieldnames = header  # " ttft_ms" from a hand-edited header is ttft_ms
        absent = [c for c in SILICON_REQUIRED_COLUMNS if c not in header]
        if absent:
            raise InputError(f"missing silicon-schema column(s) {', '.join(absent)}; add them to the header, with "
                             "empty cells where a row does not say (autotune/data/serving_silicon.csv has every "
                             "column)", source=source)
        records: list[tuple[int, dict]] = []
        for row in reader:
            number = reader.line_num  # the file's line (the header is line 1)
            cells = [v for k, v in row.items() if k is not None] + list(row.get(None) or [])
            if not any((v or "").strip() for v in cells):
                continue  # a line of empty cells from a spreadsheet export: no row
            ragged = _ragged(row, number, len(header))
            if ragged:
                raise InputError(ragged, source=source)
            records.append((number, row))
        for mode, columns in LAYOUT_COLUMNS.items():
            absent = [c for c in columns if c not in header]
            first = next(((n, r) for n, r in records if _cell(r, "mode").lower() == mode), None)
            if absent and first is not None:
                where = _where(_cell(first[1], "id"), first[0])
                raise InputError(f"missing silicon-schema column(s) {', '.join(absent)}, the layout of its {mode} rows "
                                 f"(first: {where}); add them to the header, with empty cells where a row does not "
                                 "say (autotune/data/serving_silicon.csv has every column)", source=source)
        out: list[SiliconRow | SkippedRow] = [parse_silicon_row(row, hw_of, model_of, primary_only=primary_only,
                                                                line=number, source=source)
                                              for number, row in records]
        if not out:
            raise InputError("has a header but no data rows; add one row per measured operating point below it",
                             source=source)
        return _skip_beyond_default_budget(_skip_rounded_copies(out))


def stack_scalars(dicts) -> dict:
    """Per-row scalar dicts as arrays (keys with a leading underscore carry objects, not numbers)."""
    return {k: np.array([d[k] for d in dicts], dtype=np.float64) for k in dicts[0] if not k.startswith("_")}


def default_pools(rows, side: str = "decode") -> np.ndarray:
    """Bytes of KV pool per GPU that each row's engine allots on its ``side`` engines under its default
    memory rule (``engines.memory_budget`` with no fraction, the engine's default batch limit and chunk): what
    ``autotune predict`` assumes for the same deployment, so validation and prediction share it."""
    if not rows:
        return np.zeros(0)
    a = stack_scalars([model_scalars(r.model) for r in rows])
    gs = [gpu_scalars(r.hardware) for r in rows]
    g = stack_scalars(gs)
    q = precision_arrays([r.formats for r in rows], gs, [r.kv for r in rows])
    col = lambda k: np.array([float(getattr(getattr(r, side), k)) for r in rows])  # noqa: E731
    mem_gib = [r.hardware.memory_gib for r in rows]
    limit = np.array([float(E.DEFAULTS[r.engine].max_batch(m, r.hardware.name)) for r, m in zip(rows, mem_gib)])
    chunk = np.array([E.DEFAULTS[r.engine].server_chunk(m, dp, r.hardware.name, moe=r.model.is_moe,
                                                        page=E.model_kv_page_tokens(r.model, r.hardware))
                      for r, m, dp in zip(rows, mem_gib, col("dp"))])
    role = np.array([E.ROLE_AGG if r.mode != "disagg" else E.ROLE_PREFILL if side == "prefill" else E.ROLE_DECODE
                     for r in rows])
    pools = np.zeros(len(rows))
    for engine in ENGINES:
        idx = np.array([r.engine == engine for r in rows])
        if not idx.any():
            continue
        sub = lambda d: {k: (v[idx] if isinstance(v, np.ndarray) else v) for k, v in d.items()}  # noqa: E731
        mem = E.memory_budget(engine, sub(a), sub(q), sub(g), col("tp")[idx], col("pp")[idx], col("dp")[idx],
                              col("ep")[idx], limit[idx], chunk[idx], role=role[idx])
        pools[idx] = mem.kv_pool
    return pools


ROUNDED_COPY_MS = 0.005  # half a unit of the second decimal: an export rounded to 0.01 ms


def _decimals(value: float) -> int:
    text = repr(float(value))
    return 0 if "e" in text or "." not in text else len(text.split(".")[1].rstrip("0"))


def _skip_rounded_copies(parsed: list) -> list:
    """Skip a row that repeats another's measurement rounded (module docstring): same deployment (model, GPU,
    engine, mode, pools, formats, lengths, concurrency) and TTFT and TPOT both within ``ROUNDED_COPY_MS``.  The
    row with more decimals is kept (the first in the file on a tie)."""
    groups: dict[tuple, list[int]] = {}
    for k, r in enumerate(parsed):
        if isinstance(r, SiliconRow):
            key = (r.hf_model_id, r.gpu, r.engine, r.mode, r.prefill, r.decode, r.formats, r.input_len, r.output_len,
                   r.concurrency)
            groups.setdefault(key, []).append(k)
    copy_of: dict[int, str] = {}
    for members in groups.values():
        ranked = sorted(members, key=lambda k: (-_decimals(parsed[k].measured_ttft_ms)
                                                - _decimals(parsed[k].measured_tpot_ms), k))
        kept: list[int] = []
        for k in ranked:
            r = parsed[k]
            twin = next((j for j in kept if abs(parsed[j].measured_ttft_ms - r.measured_ttft_ms) <= ROUNDED_COPY_MS
                         and abs(parsed[j].measured_tpot_ms - r.measured_tpot_ms) <= ROUNDED_COPY_MS), None)
            if twin is None:
                kept.append(k)
            else:
                copy_of[k] = parsed[twin].id
    return [SkippedRow(r.id, r.engine, r.mode, f"a rounded copy of row {copy_of[k]}'s measurement (TTFT and TPOT "
                       f"agree to {ROUNDED_COPY_MS} ms)") if k in copy_of else r for k, r in enumerate(parsed)]


def _skip_beyond_default_budget(parsed: list) -> list:
    """Skip the rows ``autotune predict`` refuses: their engine, under its default memory budget, holds no
    sequence (decode side: the prompt and output; prefill side of a disagg row: the prompt).  An expert
    parallelism that does not divide the experts is predicted with redundant copies (``engines.physical_experts``),
    as predict takes it."""
    rows = [r for r in parsed if isinstance(r, SiliconRow)]
    if not rows:
        return parsed
    a = stack_scalars([model_scalars(r.model) for r in rows])
    kv_b = np.array([KV_BYTES[r.kv] for r in rows])
    bad: dict[int, str] = {}  # by position: a user's file may repeat an id
    for side, tokens in (("decode", [r.input_len + r.output_len for r in rows]),
                         ("prefill", [r.input_len for r in rows])):
        pool = default_pools(rows, side)
        col = lambda k: np.array([float(getattr(getattr(r, side), k)) for r in rows])  # noqa: E731
        need = E.kv_pool_bytes_per_sequence(a, kv_b, col("tp"), col("pp"), np.array(tokens, dtype=np.float64),
                                            np.array([E.swa_pool_ratio(r.engine) for r in rows]))
        for k, (r, p, n, t) in enumerate(zip(rows, pool, need, tokens)):
            if k not in bad and p < n and (side == "decode" or r.mode == "disagg"):
                bad[k] = NO_DEFAULT_BUDGET.format(engine=r.engine, tokens=t, side=side)
    position = {id(r): k for k, r in enumerate(rows)}
    return [SkippedRow(r.id, r.engine, r.mode, bad[position[id(r)]])
            if isinstance(r, SiliconRow) and position[id(r)] in bad else r for r in parsed]


def _ragged(row: dict, number: int, width: int) -> str:
    """Why a row whose cell count differs from the header's cannot be read ('' when it can): csv.DictReader
    fills missing cells with None and puts extra ones under the key None.  Missing trailing cells read as empty
    (as the training and serving-runs readers read them), and so do extra empty ones; extra cells with values
    (an unquoted comma) refuse the file."""
    extra = [c for c in row.get(None) or [] if c.strip()]
    if not extra:
        return ""
    fields = width - sum(1 for k, v in row.items() if k is not None and v is None) + len(row.get(None) or [])
    return (f"{_where(_cell(row, 'id'), number)} has {fields} cells but the header names {width} columns; quote "
            "cells that hold commas")
