"""Execution plans: one plan (a frozen, validated mesh) and a batch of plans as numpy columns.

A plan places ranks in Megatron's default order tp-cp-ep-dp-pp (tensor-parallel
ranks innermost, inside a node); EP nests inside dp*cp (expert tensor parallelism
equals tp).  ``dp`` is derived: ``n_gpus / (tp * pp * cp)``.

The plan string of the CLI and the ``plan`` object of every JSON output use the
same keys: tp, pp, cp, ep, vp, sp, zero, mbs, recompute, precision, offload, plus
the derived dp.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

RECOMPUTE = ("none", "selective", "full")
PRECISION = ("bf16", "fp16", "fp8")
OFFLOAD = ("none", "cpu")
INT_KEYS = ("tp", "pp", "cp", "ep", "vp", "zero", "mbs")
PLAN_KEYS = ("tp", "pp", "cp", "ep", "vp", "sp", "zero", "mbs", "recompute", "precision", "offload")
# Categorical axes are stored in a PlanBatch as integer codes into these tuples.
CATEGORIES: Mapping[str, tuple[str, ...]] = {"recompute": RECOMPUTE, "precision": PRECISION, "offload": OFFLOAD}

# Documented defaults for plan keys left out of --plan (sp defaults to tp > 1).
PLAN_DEFAULTS: Mapping[str, Any] = {
    "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vp": 1, "zero": 1, "mbs": 1,
    "recompute": "none", "precision": "bf16", "offload": "none",
}


@dataclass(frozen=True)
class Plan:
    """One parallel layout and its settings on ``n_gpus`` GPUs."""

    n_gpus: int
    tp: int = 1
    pp: int = 1
    cp: int = 1
    ep: int = 1
    vp: int = 1
    sp: bool = False
    zero: int = 1
    mbs: int = 1
    recompute: str = "none"
    precision: str = "bf16"
    offload: str = "none"

    def __post_init__(self) -> None:
        if isinstance(self.n_gpus, bool) or not isinstance(self.n_gpus, (int, np.integer)) or self.n_gpus < 1:
            raise ValueError(f"n_gpus >= 1 must hold, but got (n_gpus={self.n_gpus!r})")
        for key in PLAN_KEYS:
            check_field(key, getattr(self, key))
        model_parallel = self.tp * self.pp * self.cp
        if self.n_gpus % model_parallel:
            raise ValueError(
                "tp*pp*cp must divide the GPU count, but got "
                f"(tp={self.tp}, pp={self.pp}, cp={self.cp}, n_gpus={self.n_gpus})"
            )
        if self.vp > 1 and self.pp == 1:
            raise ValueError(f"vp > 1 needs pipeline parallelism, but got (vp={self.vp}, pp={self.pp})")
        if self.sp and self.tp == 1:
            raise ValueError("sequence parallelism needs tp > 1, but got (sp=true, tp=1)")

    @property
    def dp(self) -> int:
        return self.n_gpus // (self.tp * self.pp * self.cp)

    def as_dict(self) -> dict[str, Any]:
        """The JSON ``plan`` object: the plan-string keys plus the derived dp."""
        out = {key: getattr(self, key) for key in PLAN_KEYS}
        out = {k: (int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v) for k, v in out.items()}
        out["dp"] = self.dp
        return out

    def as_string(self) -> str:
        parts = []
        for key in PLAN_KEYS:
            value = getattr(self, key)
            parts.append(f"{key}={'true' if value is True else 'false' if value is False else value}")
        return ",".join(parts)

    def layout(self) -> str:
        """A short human layout, e.g. ``TP8 PP4 DP2``, naming only dimensions in use."""
        parts = [f"TP{self.tp}"] if self.tp > 1 else []
        if self.pp > 1:
            parts.append(f"PP{self.pp}" + (f"x{self.vp}" if self.vp > 1 else ""))
        if self.cp > 1:
            parts.append(f"CP{self.cp}")
        if self.ep > 1:
            parts.append(f"EP{self.ep}")
        parts.append(f"DP{self.dp}")
        return " ".join(parts)


def parse_bool(text: str, key: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{key} must be true or false, but got ({key}={text!r})")


def check_field(key: str, value: Any) -> None:
    """Raise ValueError unless ``value`` is a possible value of plan key ``key`` on its own."""
    if key in INT_KEYS:
        low = 0 if key == "zero" else 1
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < low or (key == "zero" and value > 3):
            bound = "0 <= zero <= 3" if key == "zero" else f"{key} >= 1"
            raise ValueError(f"{bound} must hold, but got ({key}={value!r})")
    elif key == "sp":
        if not isinstance(value, (bool, np.bool_)):
            raise ValueError(f"sp must be true or false, but got (sp={value!r})")
    elif key in CATEGORIES:
        if value not in CATEGORIES[key]:
            raise ValueError(f"{key} must be one of {', '.join(CATEGORIES[key])}, but got ({key}={value!r})")


def parse_plan_fields(text: str) -> dict[str, Any]:
    """Parse ``"tp=8,pp=4,sp=true,..."`` into typed fields; unknown keys are an error."""
    fields: dict[str, Any] = {}
    for item in filter(None, (part.strip() for part in text.split(","))):
        if "=" not in item:
            raise ValueError(f"each plan entry must read key=value, but got ({item!r})")
        key, _, raw = (s.strip() for s in item.partition("="))
        if key == "dp":
            fields["dp"] = _parse_int(raw, key)  # derived; checked against the GPU count
            continue
        if key not in PLAN_KEYS:
            raise ValueError(f"unknown plan key {key!r}; keys: {', '.join(PLAN_KEYS)} (dp is derived)")
        if key in fields:
            raise ValueError(f"plan key {key!r} is given twice")
        if key in INT_KEYS:
            fields[key] = _parse_int(raw, key)
        elif key == "sp":
            fields[key] = parse_bool(raw, key)
        else:
            fields[key] = raw
        check_field(key, fields[key])
    return fields


def _parse_int(raw: str, key: str) -> int:
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key} must be an integer, but got ({key}={raw!r})") from None


def plan_from_fields(fields: Mapping[str, Any], n_gpus: int) -> Plan:
    """Fill documented defaults and build a validated :class:`Plan`."""
    values = {**PLAN_DEFAULTS, **{k: v for k, v in fields.items() if k != "dp"}}
    check_field("tp", values["tp"])  # before sp is derived from it
    values.setdefault("sp", values["tp"] > 1)
    plan = Plan(n_gpus=n_gpus, **values)
    if "dp" in fields and fields["dp"] != plan.dp:
        raise ValueError(
            f"dp is derived as n_gpus/(tp*pp*cp) = {plan.dp}, but got (dp={fields['dp']}); leave dp out or fix it"
        )
    return plan


def parse_plan(text: str, n_gpus: int) -> Plan:
    return plan_from_fields(parse_plan_fields(text), n_gpus)


@dataclass(frozen=True)
class PlanBatch:
    """Many plans as numpy columns, for the vectorised cost model.

    Integer axes are int64 arrays, ``sp`` is bool, and categorical axes are int8
    codes into :data:`CATEGORIES`.
    """

    n_gpus: int
    tp: np.ndarray
    pp: np.ndarray
    cp: np.ndarray
    ep: np.ndarray
    vp: np.ndarray
    sp: np.ndarray
    zero: np.ndarray
    mbs: np.ndarray
    recompute: np.ndarray
    precision: np.ndarray
    offload: np.ndarray

    @property
    def dp(self) -> np.ndarray:
        return self.n_gpus // (self.tp * self.pp * self.cp)

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @classmethod
    def from_columns(cls, n_gpus: int, columns: Mapping[str, Iterable]) -> "PlanBatch":
        arrays = {}
        for key in PLAN_KEYS:
            values = columns[key]
            if key in CATEGORIES:
                arr = np.asarray(values)
                if arr.dtype.kind in ("U", "S", "O"):
                    index = {name: i for i, name in enumerate(CATEGORIES[key])}
                    arr = np.array([index[v] for v in arr], dtype=np.int8)
                arrays[key] = arr.astype(np.int8)
            elif key == "sp":
                arrays[key] = np.asarray(values, dtype=bool)
            else:
                arrays[key] = np.asarray(values, dtype=np.int64)
        return cls(n_gpus=n_gpus, **arrays)

    @classmethod
    def from_plans(cls, plans: Iterable[Plan]) -> "PlanBatch":
        plans = list(plans)
        if not plans:
            raise ValueError("a PlanBatch needs at least one plan")
        n_gpus = plans[0].n_gpus
        return cls.from_columns(n_gpus, {key: [getattr(p, key) for p in plans] for key in PLAN_KEYS})

    def take(self, index: np.ndarray) -> "PlanBatch":
        return dataclasses.replace(self, **{key: getattr(self, key)[index] for key in PLAN_KEYS})

    def plan(self, i: int) -> Plan:
        values: dict[str, Any] = {}
        for key in PLAN_KEYS:
            value = getattr(self, key)[i]
            if key in CATEGORIES:
                values[key] = CATEGORIES[key][int(value)]
            elif key == "sp":
                values[key] = bool(value)
            else:
                values[key] = int(value)
        return Plan(n_gpus=self.n_gpus, **values)
