"""Measured serving operating points in the schema of ``serving_silicon.csv`` (TTFT and TPOT per point).

The schema (NVIDIA AIConfigurator's accuracy sample as converted in the shared data,
``serving_silicon.md``): one row is a fixed deployment (``hf_model_id``, ``gpu``, ``engine``,
``mode`` agg or disagg, its layout) driven by a closed loop of ``concurrency`` clients at nominal
``input_len`` / ``output_len``, with the measured ``ttft_ms`` and ``tpot_ms``.

Reading rules (each one is stated where it acts):

* Only unique measurements count: a row with ``duplicate_primary`` false is a copy of another and is
  skipped (and said so).
* A row whose deployment is not known is skipped with its reason: disagg rows without worker counts
  (``disagg_workers_missing``), rows whose replica count or attention-DP width is unknown
  (``batch_concurrency_mismatch``), MoE splits that contradict the GPU count (``moe_layout_inconsistent``),
  a model id the catalogue does not know, a GPU without a profile, missing lengths or measurements.
* ``attention_dp`` empty or 0 reads as 1; ``moe_tp``/``moe_ep`` empty: the MoE layer is split like the
  attention.  A MoE layout whose ``tp`` does not divide the attention heads or exceeds a node is AIC's
  lossy encoding of attention DP + expert parallelism (DEP; e.g. ``tp 72`` on GB200 for DeepSeek): read
  as ``dp = tp, tp = 1, ep = GPUs``.
* Weight formats: ``weight_precision`` for attention and dense layers, ``moe_precision`` for routed
  experts (``arch.class_formats``); an ``fp4`` label on a checkpoint the catalogue knows as MXFP4
  (gpt-oss) is MXFP4, an ``int4`` on a compressed-tensors INT4 checkpoint (Kimi-K2.5) has group 32.
* KV-cache dtype (no row states it): fp8 for quantised checkpoints, bf16 for bf16 ones (the
  InferenceX launch scripts behind the rows pass ``--kv-cache-dtype fp8`` with quantised checkpoints).
* Engine: the ``engine`` column (vllm, sglang, trtllm); releases are not distinguished (1,838 rows
  have none; all are late-2025 to spring-2026 builds).
"""

from __future__ import annotations

import csv
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from ..errors import InputError
from ..inputs.catalogue import lookup_hf_id
from ..inputs.hardware import Hardware, load_hardware, resolve_hardware_name
from ..inputs.modelspec import ModelSpec, load_model
from .engines import ENGINES

SILICON_MARKER_COLUMNS = frozenset({"hf_model_id", "engine", "mode", "ttft_ms", "tpot_ms", "concurrency"})
UNKNOWN_DEPLOYMENT_FLAGS = {
    "disagg_workers_missing": "disagg worker counts not recorded (the per-stage layout is lossy)",
    "batch_concurrency_mismatch": "replica count or attention-DP width not recorded (concurrency != batch x attention DP)",
    "moe_layout_inconsistent": "MoE split contradicts the GPU count (moe_tp x moe_ep != tp x attention_dp)",
}
PRECISION_LABELS = {"bf16": "bf16", "fp16": "bf16", "fp8": "fp8", "fp4": "fp4", "nvfp4": "fp4", "mxfp4": "mxfp4",
                    "int4": "int4", "int8": "int8"}


def is_silicon_schema(columns) -> bool:
    return SILICON_MARKER_COLUMNS <= set(columns)


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
    hf_model_id: str
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


def _num(row: dict, key: str) -> float | None:
    text = (row.get(key) or "").strip()
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        return None
    return value if math.isfinite(value) else None


def _pos_int(row: dict, key: str, default: int = 1) -> int:
    value = _num(row, key)
    return int(value) if value is not None and value > 0 else default


def _pool(row: dict, prefix: str, model: ModelSpec, gpus_per_node: int) -> tuple[Pool, str]:
    tp = _pos_int(row, f"{prefix}tp")
    pp = _pos_int(row, f"{prefix}pp")
    dp = _pos_int(row, f"{prefix}attention_dp")
    workers = _pos_int(row, f"{prefix}workers") if prefix else 1
    G = tp * dp
    ep = min(_pos_int(row, f"{prefix}moe_ep"), G)
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


def parse_silicon_row(row: dict, hardware_loader: Callable[[str], Hardware] = load_hardware,
                      model_loader: Callable[[str], ModelSpec] = load_model, *,
                      primary_only: bool = True) -> SiliconRow | SkippedRow:
    rid = (row.get("id") or "").strip()
    engine = (row.get("engine") or "").strip().lower()
    mode = (row.get("mode") or "").strip().lower()

    def skip(reason: str) -> SkippedRow:
        return SkippedRow(rid, engine, mode, reason)

    if primary_only and (row.get("duplicate_primary") or "").strip().lower() == "false":
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
        return skip(f"model {hf_id or '(empty)'!r}: {why}")
    try:
        model = model_loader(entry.spec)
    except InputError as exc:
        return skip(f"model {hf_id!r}: {exc}")
    gpu_label = (row.get("gpu") or "").strip()
    gpu = resolve_hardware_name(gpu_label)
    if gpu is None:
        return skip(f"GPU {gpu_label!r} has no bundled profile")
    hw = hardware_loader(gpu)
    I, O = _num(row, "input_len"), _num(row, "output_len")
    if not I or not O or I < 1 or O < 1:
        return skip("input/output lengths not recorded")
    C = _num(row, "concurrency_per_replica") or _num(row, "concurrency")
    if not C or C < 1:
        return skip("concurrency not recorded")
    ttft, tpot = _num(row, "ttft_ms"), _num(row, "tpot_ms")
    if not ttft or not tpot or ttft <= 0 or tpot <= 0:
        return skip("TTFT or TPOT not recorded")
    formats = _formats(model, row.get("weight_precision", ""), row.get("moe_precision", ""), hf_id)
    if formats is None:
        return skip(f"unknown precision {row.get('weight_precision')!r}/{row.get('moe_precision')!r}")
    kv = "bf16" if all(f == "bf16" for f in formats) else "fp8"
    node = hw.gpus_per_node if hw.gpus_per_scale_up_domain <= hw.gpus_per_node else 8
    if mode == "agg":
        engine_pool, note = _pool(row, "", model, node)
        prefill = decode = engine_pool
    else:
        if not _num(row, "prefill_workers") or not _num(row, "decode_workers"):
            return skip(UNKNOWN_DEPLOYMENT_FLAGS["disagg_workers_missing"])
        prefill, n1 = _pool(row, "prefill_", model, node)
        decode, n2 = _pool(row, "decode_", model, node)
        note = "; ".join(filter(None, (n1, n2)))
    return SiliconRow(id=rid, engine=engine, mode=mode, hf_model_id=hf_id, model=model, gpu=gpu, hardware=hw,
                      prefill=prefill, decode=decode, formats=formats, kv=kv, input_len=int(I), output_len=int(O),
                      concurrency=float(C), measured_ttft_ms=float(ttft), measured_tpot_ms=float(tpot),
                      layout_note=note)


def read_silicon_rows(path: Path, *, primary_only: bool = True) -> list[SiliconRow | SkippedRow]:
    """Every row of a silicon-schema CSV, parsed or skipped with its reason (never an exception per row)."""
    source = str(path)
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
        absent = sorted(SILICON_MARKER_COLUMNS - set(reader.fieldnames or []))
        if absent:
            raise InputError(f"missing silicon-schema column(s) {', '.join(absent)}; see docs/serving.md", source=source)
        return [parse_silicon_row(row, hw_of, model_of, primary_only=primary_only) for row in reader]
