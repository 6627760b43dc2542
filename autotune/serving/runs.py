"""Measured serving runs in the schema of ``serving_runs.csv`` (TensorRT-LLM performance tables).

Each row becomes a :class:`ServingRun`: the model shape (from the row's own architecture
columns), the GPU profile, the plan (tp, pp, weight precision, KV dtype), the request shape
and what was measured.  Rows that cannot be predicted are kept as :class:`SkippedServingRow`
with the reason.  A KV dtype the row leaves empty is not guessed: the run is evaluated with
every dtype the GPU supports and the range is reported.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..inputs.catalogue import hf_id_problem
from ..inputs.hardware import Hardware
from ..inputs.measured_runs import (
    CsvTable,
    layout_reason,
    number,
    parse_rows,
    read_table,
)
from ..inputs.modelspec import ModelSpec, MoESpec
from ..inputs.request import MAX_GPUS
from ..inputs.workload import MIN_REQUEST_RATE
from .engines import DEFAULT_ENGINE, ENGINE_ALIASES, ENGINES, MAX_LENGTH, release_key_problem, split_engine_cell
from .plausibility import (PLAUSIBLE_FLOOR_FACTOR, below_floor, output_ceiling_tokens_per_s_per_gpu, tpot_floor_ms,
                           ttft_floor_ms)

# A release as the engine columns write it: MAJOR.MINOR first (v0.6.3, 0.14.0 (TensorRT engine, trtllm-bench)), any
# note after it.  Searched anywhere, "abc" or "1..2" named no release and the row was predicted with the family's
# current parameters, and "-1.0" read as release 1.0.
RELEASE_CELL = re.compile(r"v?(\d+)\.(\d+)")

# Columns that mark the serving schema (``autotune validate`` dispatches on them).
SERVING_MARKER_COLUMNS = frozenset({"output_tokens_per_s_per_gpu", "input_len", "output_len", "weight_precision"})
REQUIRED_COLUMNS = (
    "id", "source_group", "model_name", "n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads",
    "vocab_size", "gpu", "n_gpus", "tp", "pp", "weight_precision", "kv_cache_dtype", "input_len", "output_len",
    "scenario", "output_tokens_per_s_per_gpu",
)
KINDS = ("max-throughput", "static", "prefill", "rate", "concurrency")


# columns only the serving-runs schema has (the training schema has seq_len and none of these)
SERVING_ONLY_COLUMNS = frozenset({"input_len", "output_len", "scenario", "ttft_ms_mean", "itl_ms_mean",
                                  "concurrency_or_batch", "output_tokens_per_s_per_gpu"})


def is_serving_schema(columns) -> bool:
    """Whether a header is meant to be this schema (it may still lack a required column; the reader says which)."""
    names = set(columns)
    return SERVING_MARKER_COLUMNS <= names or (len(SERVING_ONLY_COLUMNS & names) >= 2 and "seq_len" not in names)


@dataclass(frozen=True)
class ServingRun:
    id: str
    source_group: str
    engine: str  # engine release key for the fitted parameters, from the engine and engine_version columns
    kind: str  # one of KINDS
    model: ModelSpec
    gpu: str
    n_gpus: int
    tp: int
    pp: int
    weights: str
    kv: tuple[str, ...]  # one dtype, or every candidate when the row does not say
    input_len: int
    output_len: int
    batch: int | None  # static batch size, or the users in flight of a concurrency (closed-loop) row
    request_rate: float | None
    measured_tokens_per_s_per_gpu: float | None
    measured_ttft_ms: float | None
    measured_itl_ms: float | None


@dataclass(frozen=True)
class SkippedServingRow:
    id: str
    source_group: str
    reason: str


def _weights(text: str) -> str | None:
    t = text.strip().lower()
    if t.startswith(("fp16", "bf16")):
        return "bf16"
    for name in ("fp8", "fp4", "int8", "int4"):
        if t.startswith(name):
            return name
    return None


def _kind(row: dict) -> str:
    scenario = row["scenario"].lower()
    if "single-request" in scenario or "prefill only" in scenario:
        return "prefill"
    if "static" in scenario:
        return "static"
    rate = (row.get("request_rate") or "").strip().lower()
    if rate and rate not in ("inf", "infinite"):
        return "rate"
    how = (row.get("concurrency_kind") or "").lower()
    if (row.get("concurrency_or_batch") or "").strip() and any(w in how for w in ("concurren", "user", "client",
                                                                                   "closed loop", "closed-loop")):
        return "concurrency"
    return "max-throughput"


# Measurement columns the prediction does not compare with (totals, tails, end-to-end latency); still numbers.
UNREAD_MEASUREMENTS = ("output_tokens_per_s", "total_tokens_per_s", "request_throughput_per_s", "ttft_ms_p99",
                       "tpot_ms_p99", "e2e_latency_s_mean", "e2e_latency_s_median", "e2e_latency_s_p99")


def _float(row: dict, key: str) -> float | None:
    """A number, or None for an empty cell; anything else is the file's error, not a silent default."""
    return number(row, key)


def _int(row: dict, key: str) -> int | None:
    return number(row, key, whole=True)  # type: ignore[return-value]


def unknown_engine_reason(engine: str) -> str:
    return (f"engine must be one of {', '.join(ENGINES)} (or empty: the default, {DEFAULT_ENGINE}), but got "
            f"(engine={engine!r}); a row of another engine (NIM runs TensorRT-LLM or vLLM inside) names the one it runs")


def engine_key(engine: str, version: str, row_id: str = "") -> str:
    """The engine release a row ran on, e.g. ``trtllm-0.14``, ``trtllm-0.14-triton``, ``vllm-0.6``.

    Read from the ``engine`` and ``engine_version`` columns only (major.minor; a Triton front end is its own
    key): a row that names no engine is predicted for the default one, never for one guessed from its
    source's name; another engine (NIM, which runs TensorRT-LLM or vLLM inside) is refused here, and its row
    skipped with that reason by ``parse_row``: the row names the engine it runs to be validated.
    """
    name = (engine or "").strip().lower()
    name = ENGINE_ALIASES.get(name, name)
    if name and name not in ENGINES:  # not guessed: its parameters would be another engine's under a new key
        raise InputError(unknown_engine_reason(engine), field="engine")
    found = RELEASE_CELL.match((version or "").strip().lower())
    if name and found:
        key = f"{name}-{int(found.group(1))}.{int(found.group(2))}"
        if "triton" in (version or "").lower():
            key += "-triton"
        return key
    return name or DEFAULT_ENGINE


def _model_of(row: dict, shape: dict) -> ModelSpec | str:
    """The row's model: its own architecture columns, else the bundled spec of its Hugging Face id."""
    missing = [k for k, v in shape.items() if not v]
    if not missing:
        return ""
    hf_id = (row.get("hf_model_id") or "").strip()
    if hf_id:
        from ..inputs.catalogue import lookup_hf_id
        from ..inputs.modelspec import load_model

        entry = lookup_hf_id(hf_id)
        if entry is not None and entry.spec:
            return load_model(entry.spec)
        why = entry.reason if entry is not None else "not in profiles/catalogue/hf_models.yaml"
        return f"architecture not stated ({', '.join(missing)}) and model {hf_id!r}: {why}"
    return f"architecture not stated: {', '.join(missing)}"


def _engine_cell(row: dict, rid: str) -> tuple[str, str]:
    """The row's engine and the release it names: the ``engine`` cell (``NAME`` or ``NAME@VERSION``, read by
    ``engines.split_engine_cell`` as the silicon reader reads it) and ``engine_version``, which a version in the engine
    cell fills when empty and must agree with (major.minor) when not."""
    raw = row.get("engine") or ""
    try:
        name, version = split_engine_cell(raw)
    except ValueError as exc:
        raise InputError(f"row {rid!r}: {exc}", field="engine") from None
    column = (row.get("engine_version") or "").strip()
    for key, text in (("engine", version), ("engine_version", column)):
        if text and not RELEASE_CELL.match(text.lower()):
            raise InputError(f"row {rid!r}: a release must begin with MAJOR.MINOR (e.g. 0.14.0, v0.6.3; a note may "
                             f"follow), but got ({key}={(raw.strip() if key == 'engine' else text)!r}); write the "
                             "release, or leave it out where it is not known", field=key)
    if version and column:
        ours, theirs = (RELEASE_CELL.match(v.lower()) for v in (version, column))
        if ours and theirs and (int(ours[1]), int(ours[2])) != (int(theirs[1]), int(theirs[2])):
            raise InputError(f"row {rid!r}: the engine cell and engine_version must name one release, but got "
                             f"(engine={raw.strip()!r}, engine_version={column!r}); keep the release in one of them",
                             field="engine")
    return name, column or version


def parse_row(row: dict, supported_gpus: set[str], fp8_gpus: set[str]) -> ServingRun | SkippedServingRow:
    rid, group = row["id"], row["source_group"]
    named, version = _engine_cell(row, rid)  # a cell that names no engine or release is refused before any skip
    problem = hf_id_problem(row.get("hf_model_id") or "")
    if problem is not None:  # org/name@main@x: refused whether or not the row's own columns state the architecture
        raise InputError(f"row {rid!r}: hf_model_id must be a Hugging Face id ORG/NAME or ORG/NAME@REVISION, but got "
                         f"(hf_model_id={(row.get('hf_model_id') or '').strip()!r}): {problem}", field="hf_model_id")
    shape = {k: _int(row, k) for k in ("n_layers", "hidden_size", "ffn_hidden_size", "n_heads", "n_kv_heads", "vocab_size")}
    catalogued = _model_of(row, shape)
    if isinstance(catalogued, str) and catalogued:
        return SkippedServingRow(rid, group, catalogued)
    gpu = row["gpu"].strip()
    if gpu not in supported_gpus:
        from ..inputs.hardware import resolve_hardware_name, unknown_hardware_reason

        alias = resolve_hardware_name(gpu)
        if alias is None or alias not in supported_gpus:
            return SkippedServingRow(rid, group, unknown_hardware_reason(gpu))
        gpu = alias
    weights = _weights(row["weight_precision"])
    if weights is None:
        return SkippedServingRow(rid, group, f"unknown weight precision {row['weight_precision']!r}")
    # the KV dtypes the estimate models (plan.KV_DTYPES), under the engines' names (vLLM and SGLang: auto = the
    # model's dtype, fp8_e4m3, torch's float8_e4m3fn, half); another one (int8, fp4) or a typo is not read as bf16
    kv_text = row["kv_cache_dtype"].strip().lower()
    if kv_text.startswith(("fp8", "float8")):
        kv: tuple[str, ...] = ("fp8",)
    elif kv_text.startswith(("bf16", "fp16", "bfloat16", "float16", "half")) or kv_text == "auto":
        kv = ("bf16",)  # auto: the activations' dtype, 16-bit whatever the weights
    elif not kv_text:
        kv = ("bf16", "fp8") if gpu in fp8_gpus else ("bf16",)
    else:
        return SkippedServingRow(rid, group, f"kv_cache_dtype must be bf16, fp16, fp8 or auto (or empty: unknown), but "
                                             f"got (kv_cache_dtype={row['kv_cache_dtype']!r}); leave it empty if unknown")
    if isinstance(catalogued, ModelSpec):
        model = catalogued
    else:
        experts, topk = _int(row, "moe_experts"), _int(row, "moe_topk")
        if experts and topk is None:  # the experts each token runs set the MoE's FLOPs: not guessed
            return SkippedServingRow(rid, group, f"architecture not stated: moe_topk (the row has moe_experts={experts})")
        hidden, heads = shape["hidden_size"], shape["n_heads"]
        if hidden and heads and hidden % heads:  # the head size is hidden_size / n_heads: not rounded down
            return SkippedServingRow(rid, group, f"architecture invalid: hidden_size {hidden} is not divisible by n_heads "
                                                 f"{heads} (the head size is hidden_size / n_heads)")
        try:
            moe = MoESpec(n_experts=experts, top_k=topk, expert_ffn_hidden_size=shape["ffn_hidden_size"]) if experts \
                else None
            model = ModelSpec(
                name=row["model_name"], n_layers=shape["n_layers"], hidden_size=shape["hidden_size"],
                ffn_hidden_size=shape["ffn_hidden_size"], n_heads=shape["n_heads"], n_kv_heads=shape["n_kv_heads"],
                head_dim=shape["hidden_size"] // shape["n_heads"], vocab_size=shape["vocab_size"], mlp="swiglu", moe=moe,
            )
        except ValueError as exc:
            return SkippedServingRow(rid, group, f"architecture invalid: {exc}")
    kind = _kind(row)
    measured = _float(row, "output_tokens_per_s_per_gpu")
    # the first column given; a 0 is given (and refused below), where `if v` had read it as empty and dropped the
    # row's latency comparison without a word
    ttft = next((v for v in map(lambda c: _float(row, c), TTFT_COLUMNS) if v is not None), None)
    itl = next((v for v in map(lambda c: _float(row, c), ITL_COLUMNS) if v is not None), None)
    for key in UNREAD_MEASUREMENTS:  # not predicted, but a NaN, inf or a negative there says the row is damaged
        value = _float(row, key)
        if value is not None and value <= 0:
            raise InputError(f"row {rid!r}: a measurement must be > 0 (or empty: not recorded), but got ({key}="
                             f"{value!r})", field=key)
    for key, value in (("output_tokens_per_s_per_gpu", measured), (measured_column(row, TTFT_COLUMNS), ttft),
                       (measured_column(row, ITL_COLUMNS), itl)):
        if value is not None and value < 1e-3:  # tokens/s or ms: a vanishing value is a unit slip or a typo
            raise InputError(f"row {rid!r}: a measurement must be at least 0.001, but got {value!r}; check the unit",
                             field=key)
    for key in ("tp", "pp", "n_gpus", "input_len", "output_len", "concurrency_or_batch"):
        value = _int(row, key)
        if value is not None and value < 1:  # a batch or users in flight of 0 or fewer predicted NaN or a negative
            raise InputError(f"row {rid!r}: must be >= 1, but got {value!r}", field=key)
    # bounded as the silicon reader bounds them: an input of 1e12 tokens was predicted at 1e-13 tokens/s
    for key, what in (("input_len", "tokens per request"), ("output_len", "tokens per request"),
                      ("concurrency_or_batch", "sequences or users in flight")):
        value = _int(row, key)
        if value is not None and value > MAX_LENGTH:
            raise InputError(f"row {rid!r}: {key} <= {MAX_LENGTH:,} must hold ({what}), but got ({key}={value!r}); "
                             "check the unit", field=key)
    counts = {key: _int(row, key) for key in ("tp", "pp", "n_gpus", "ep", "replicas", "attention_dp")}
    for key, value in counts.items():
        if value is not None and value > MAX_GPUS:  # 1e15 GPUs is a unit slip, not a cluster
            raise InputError(f"row {rid!r}: {key} <= {MAX_GPUS:,} must hold (GPUs), but got ({key}={value!r})", field=key)
        if value is not None and value < 1 and key in ("ep", "replicas", "attention_dp"):
            raise InputError(f"row {rid!r}: {key} >= 1 must hold (or empty: 1), but got ({key}={value!r})", field=key)
    if kind == "rate":  # an open loop's arrivals: "inf" (or empty) is all requests queued at once, read as such above
        offered = _float(row, "request_rate")
        if offered is not None and offered <= 0:  # predicted 0 or negative tokens/s, compared as an error of -100%
            raise InputError(f"row {rid!r}: request_rate > 0 must hold (requests per second; inf or empty: all "
                             f"requests queued at once), but got (request_rate={offered!r})", field="request_rate")
        if offered is not None and offered < MIN_REQUEST_RATE:
            raise InputError(f"row {rid!r}: request_rate >= {MIN_REQUEST_RATE:g} must hold (requests per second: one "
                             f"request in {1 / MIN_REQUEST_RATE:,.0f} s is no benchmark), but got (request_rate="
                             f"{offered!r}); check the unit", field="request_rate")
    if kind not in ("prefill", "concurrency") and measured is None:
        return SkippedServingRow(rid, group, "no output tokens/s per GPU")
    if kind == "concurrency" and measured is None and ttft is None and itl is None:
        return SkippedServingRow(rid, group, "concurrency row without throughput, TTFT or TPOT")
    if kind == "prefill" and ttft is None:
        return SkippedServingRow(rid, group, "single-request row without TTFT")
    batch = _int(row, "concurrency_or_batch") if kind in ("static", "prefill", "concurrency") else None
    if kind == "static" and not batch:
        return SkippedServingRow(rid, group, "static-batch row without its batch size")
    rate = _float(row, "request_rate") if kind == "rate" else None
    tp, pp = counts["tp"] or 1, counts["pp"] or 1
    # this validation predicts one engine of tp x pp GPUs (validation._legacy_batch): a row that states expert
    # parallelism, attention DP or several replicas is one it cannot express, skipped with that reason rather
    # than predicted as if the column were empty
    for key, what in (("ep", "expert parallelism"), ("attention_dp", "attention data parallelism"),
                      ("replicas", "several replicas")):
        value = counts[key]
        if value is not None and value > 1:
            return SkippedServingRow(rid, group, f"{what} ({key}={value}) is not modelled for serving-runs rows; state "
                                                 "one replica's layout, or use the silicon schema (docs/serving.md)")
    layout = layout_reason(counts["n_gpus"], [("tp", tp), ("pp", pp)])
    if layout:
        return SkippedServingRow(rid, group, layout)
    input_len, output_len = _int(row, "input_len"), _int(row, "output_len")
    if input_len is None or output_len is None:
        return SkippedServingRow(rid, group, "input/output lengths not recorded")
    if model.n_heads % tp:
        return SkippedServingRow(rid, group, f"heads {model.n_heads} not divisible by tp {tp}")
    if named and named not in ENGINES:  # a row autotune cannot express: skipped with the reason, the rest validated
        return SkippedServingRow(rid, group, unknown_engine_reason(row.get("engine", "")))
    engine = engine_key(named, version, rid)
    outside = release_key_problem(engine)
    if outside:  # a release predict cannot be asked for (--engine NAME@X.Y) is not validated either
        return SkippedServingRow(rid, group, outside.split(", but got")[0])
    return ServingRun(
        id=rid, source_group=group, engine=engine, kind=kind, model=model, gpu=gpu,
        n_gpus=counts["n_gpus"] or tp * pp, tp=tp, pp=pp, weights=weights, kv=kv,
        input_len=input_len, output_len=max(output_len, 1), batch=batch,
        request_rate=rate, measured_tokens_per_s_per_gpu=measured, measured_ttft_ms=ttft, measured_itl_ms=itl,
    )


def read_serving_table(path: Path) -> CsvTable:
    """A serving-runs CSV, checked (header, ids, required columns) but not yet parsed: its other columns
    (``dataset``) are read from the same stripped header and cells."""
    return read_table(Path(path), required=REQUIRED_COLUMNS, schema="docs/serving.md")


def read_serving_runs(path: Path, supported_gpus: set[str], fp8_gpus: set[str]) -> list[ServingRun | SkippedServingRow]:
    """Every row of a serving-runs CSV: a :class:`ServingRun`, or a :class:`SkippedServingRow` with the reason
    (a row autotune cannot express).  A cell that is not a number, or not a finite one, is an error naming the
    row and column: a corrupt measurement is not silently dropped."""
    return parse_serving_rows(read_serving_table(path), supported_gpus, fp8_gpus)


def parse_serving_rows(table: CsvTable, supported_gpus: set[str],
                       fp8_gpus: set[str]) -> list[ServingRun | SkippedServingRow]:
    """The rows of a table that :func:`read_serving_table` read, as :func:`read_serving_runs` returns them."""
    return parse_rows(table, lambda row: parse_row(row, supported_gpus, fp8_gpus),
                      lambda row, reason: SkippedServingRow(str(row.get("id", "")), str(row.get("source_group", "")),
                                                            reason))


# Where a row's TTFT and ITL are read from, in order: means where the row has them, else medians (the columns name
# their statistic).
TTFT_COLUMNS = ("ttft_ms_mean", "ttft_ms_median")
ITL_COLUMNS = ("itl_ms_mean", "tpot_ms_mean", "itl_ms_median", "tpot_ms_median")


def measured_column(row: Mapping[str, Any], columns: Sequence[str]) -> str:
    """The column of ``columns`` a measurement was read from (the first non-empty one; the first when all are)."""
    return next((c for c in columns if str(row.get(c) or "").strip()), columns[0])


def implausible_run(run: ServingRun, hardware: Hardware, row: Mapping[str, Any]) -> tuple[str, str] | None:
    """(column, why) where a measured figure of ``run`` (read from its CSV ``row``) is beyond what the hardware can
    do (plausibility.py, on one replica's tp*pp GPUs); None when every figure is plausible.  The bundled rows sit at
    least 2x (TTFT), 5.8x (ITL) and 3.2x (throughput) inside the bounds."""
    gpus = run.tp * run.pp
    on = f"at the {hardware.name}'s peak on {gpus} GPU(s)"
    checks = ((TTFT_COLUMNS, run.measured_ttft_ms, ttft_floor_ms(run.model, hardware, run.input_len, gpus),
               f"prefilling {run.input_len:,} tokens of {run.model.name} {on}", "time to first token"),
              (ITL_COLUMNS, run.measured_itl_ms, tpot_floor_ms(run.model, hardware, gpus),
               f"streaming {run.model.name}'s active weights once {on}", "time per output token"))
    for columns, value_ms, floor_ms, what, mean in checks:
        column = measured_column(row, columns)
        why = None if value_ms is None else below_floor(column, value_ms, floor_ms, what, mean)
        if why is not None:
            return column, why
    value = run.measured_tokens_per_s_per_gpu
    ceiling = output_ceiling_tokens_per_s_per_gpu(run.model, hardware)
    if value is not None and value > ceiling:
        return "output_tokens_per_s_per_gpu", (
            f"output_tokens_per_s_per_gpu must be at most {PLAUSIBLE_FLOOR_FACTOR:g}x what the {hardware.name}'s peak "
            f"gives at two FLOPs per active parameter of {run.model.name} ({ceiling:,.0f}), but got "
            f"(output_tokens_per_s_per_gpu={value:g}); write the output tokens per second of one GPU, not of the "
            "whole deployment")
    return None

