"""Serve plans: one plan (frozen, validated) and many plans as numpy columns.

A serve plan splits ``n_gpus`` into ``replicas`` identical engines of ``tp * pp``
GPUs each (``replicas`` is derived: ``n_gpus / (tp * pp)``).  ``ep`` is expert
parallelism inside one engine's tensor-parallel group (1, or equal to ``tp``: the
experts are spread over the TP ranks instead of each expert being split).
``weights`` is the weight precision, ``kv`` the KV-cache dtype and ``max_batch``
the engine's limit on concurrent sequences.

The plan string and the JSON ``plan`` object use the same keys:
tp, pp, ep, weights, kv, max_batch, plus the derived replicas.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

# Weight precisions.  bf16/fp8/int8/fp4 run their GEMMs at that precision (W8A8, W4A4);
# int4 is weight-only (AWQ/GPTQ-style, one bf16 scale per group of 128) and computes in bf16.
WEIGHTS = ("bf16", "fp8", "int8", "int4", "fp4")
KV_DTYPES = ("bf16", "fp8")
SERVE_KEYS = ("tp", "pp", "ep", "weights", "kv", "max_batch")
SERVE_INT_KEYS = ("tp", "pp", "ep", "max_batch")
SERVE_CATEGORIES: Mapping[str, tuple[str, ...]] = {"weights": WEIGHTS, "kv": KV_DTYPES}
SERVE_DEFAULTS: Mapping[str, Any] = {"tp": 1, "pp": 1, "ep": 1, "weights": "bf16", "kv": "bf16", "max_batch": 256}
# The tensor-core peak each weight precision computes at (a hardware profile key).
COMPUTE_PRECISION: Mapping[str, str] = {"bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16", "fp4": "fp4"}
# Hardware peak a KV dtype needs (fp8 KV cache: the GPU must have fp8).
KV_PRECISION: Mapping[str, str] = {"bf16": "bf16", "fp8": "fp8"}


@dataclass(frozen=True)
class ServePlan:
    n_gpus: int
    tp: int = 1
    pp: int = 1
    ep: int = 1
    weights: str = "bf16"
    kv: str = "bf16"
    max_batch: int = 256

    def __post_init__(self) -> None:
        for key in SERVE_KEYS:
            check_serve_field(key, getattr(self, key))
        if self.n_gpus % (self.tp * self.pp):
            raise ValueError(f"tp*pp must divide the GPU count, but got (tp={self.tp}, pp={self.pp}, "
                             f"n_gpus={self.n_gpus})")
        if self.ep not in (1, self.tp):
            raise ValueError(f"ep is 1 or equal to tp (experts spread over the TP ranks), but got (ep={self.ep}, tp={self.tp})")

    @property
    def replicas(self) -> int:
        return self.n_gpus // (self.tp * self.pp)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k) for k in SERVE_KEYS}
        out = {k: int(v) if isinstance(v, (int, np.integer)) else v for k, v in out.items()}
        out["replicas"] = self.replicas
        return out

    def as_string(self) -> str:
        return ",".join(f"{k}={getattr(self, k)}" for k in SERVE_KEYS) + f",replicas={self.replicas}"

    def layout(self) -> str:
        parts = [f"TP{self.tp}"]
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        return " ".join(parts) + f" x{self.replicas}"


def check_serve_field(key: str, value: Any) -> None:
    if key in SERVE_INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
            raise ValueError(f"{key} >= 1 must hold, but got ({key}={value!r})")
    elif key in SERVE_CATEGORIES and value not in SERVE_CATEGORIES[key]:
        raise ValueError(f"{key} must be one of {', '.join(SERVE_CATEGORIES[key])}, but got ({key}={value!r})")


def parse_serve_fields(text: str) -> dict[str, Any]:
    """``"tp=4,weights=fp8,max_batch=64"`` -> typed fields; unknown keys are an error."""
    fields: dict[str, Any] = {}
    for item in filter(None, (p.strip() for p in text.split(","))):
        if "=" not in item:
            raise ValueError(f"each plan entry must read key=value, but got ({item!r})")
        key, _, raw = (s.strip() for s in item.partition("="))
        if key in fields:
            raise ValueError(f"plan key {key!r} is given twice")
        if key == "replicas" or key in SERVE_INT_KEYS:
            try:
                fields[key] = int(raw)
            except ValueError:
                raise ValueError(f"{key} must be an integer, but got ({key}={raw!r})") from None
        elif key in SERVE_CATEGORIES:
            fields[key] = raw.lower()
        else:
            raise ValueError(f"unknown serve plan key {key!r}; keys: {', '.join(SERVE_KEYS)} (replicas is derived)")
        if key != "replicas":
            check_serve_field(key, fields[key])
    return fields


def serve_plan_from_fields(fields: Mapping[str, Any], n_gpus: int) -> ServePlan:
    values = {**SERVE_DEFAULTS, **{k: v for k, v in fields.items() if k != "replicas"}}
    plan = ServePlan(n_gpus=n_gpus, **values)
    if "replicas" in fields and fields["replicas"] != plan.replicas:
        raise ValueError(f"replicas is derived as n_gpus/(tp*pp) = {plan.replicas}, but got "
                         f"(replicas={fields['replicas']}); leave it out or fix tp, pp or --gpus")
    return plan


def parse_serve_plan(text: str, n_gpus: int) -> ServePlan:
    return serve_plan_from_fields(parse_serve_fields(text), n_gpus)


@dataclass(frozen=True)
class ServePlanBatch:
    """Many serve plans as numpy columns (categoricals as int8 codes into SERVE_CATEGORIES)."""

    n_gpus: int
    tp: np.ndarray
    pp: np.ndarray
    ep: np.ndarray
    weights: np.ndarray
    kv: np.ndarray
    max_batch: np.ndarray

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @property
    def replicas(self) -> np.ndarray:
        return self.n_gpus // (self.tp * self.pp)

    @classmethod
    def from_columns(cls, n_gpus: int, columns: Mapping[str, Iterable]) -> "ServePlanBatch":
        arrays = {}
        for key in SERVE_KEYS:
            arr = np.asarray(list(columns[key]) if not isinstance(columns[key], np.ndarray) else columns[key])
            if key in SERVE_CATEGORIES:
                if arr.dtype.kind in ("U", "S", "O"):
                    arr = np.array([SERVE_CATEGORIES[key].index(v) for v in arr], dtype=np.int8)
                arrays[key] = arr.astype(np.int8)
            else:
                arrays[key] = arr.astype(np.int64)
        return cls(n_gpus=n_gpus, **arrays)

    @classmethod
    def from_plans(cls, plans: Iterable[ServePlan]) -> "ServePlanBatch":
        plans = list(plans)
        assert plans, "a ServePlanBatch needs at least one plan"
        return cls.from_columns(plans[0].n_gpus, {k: [getattr(p, k) for p in plans] for k in SERVE_KEYS})

    def take(self, index: np.ndarray) -> "ServePlanBatch":
        return dataclasses.replace(self, **{k: getattr(self, k)[index] for k in SERVE_KEYS})

    def plan(self, i: int) -> ServePlan:
        values: dict[str, Any] = {}
        for key in SERVE_KEYS:
            v = getattr(self, key)[i]
            values[key] = SERVE_CATEGORIES[key][int(v)] if key in SERVE_CATEGORIES else int(v)
        return ServePlan(n_gpus=self.n_gpus, **values)
