"""Execution plans: one plan (a frozen, validated mesh) and a batch of plans as numpy columns.

A plan places ranks in Megatron's default order tp-cp-dp-pp for attention and dense layers
(tensor-parallel ranks innermost, inside a node).  Expert layers have a mapping of their own
over the same ranks of a pipeline stage (Megatron-Core "MoE parallel folding", Liu et al.
arXiv 2504.14960): expert tensor parallelism ``etp`` innermost, then expert parallelism
``ep``, then expert data parallelism, so EP may span the TP, CP and DP ranks of attention;
``etp * ep`` must divide ``tp * cp * dp``.  ``etp`` defaults to ``tp`` (Megatron's default;
then EP nests inside dp*cp as before folding).  ``dp`` is derived: ``n_gpus / (tp * pp * cp)``.

``schedule`` names the pipeline schedule: ``1f1b`` (interleaved with ``vp > 1``) or
``dualpipe`` (DeepSeek-V3's bidirectional schedule, arXiv 2412.19437 §3.2.1).

The plan string of the CLI and the ``plan`` object of every JSON output use the
same keys: tp, pp, cp, ep, vp, sp, zero, mbs, recompute, precision, offload, plus
the derived dp, and etp and schedule; a plan string names those two only where they differ
from their defaults (etp = tp, schedule = 1f1b), so plan strings that do not use them read as before.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import comma_items
from ..inputs.request import MAX_GPUS

RECOMPUTE = ("none", "selective", "full")
# GEMM precisions of training: fp8 runs the linear layers' GEMMs on the fp8 tensor cores (TransformerEngine
# delayed/current/MXFP8/blockwise scaling, torchao Float8); fp4 on the FP4 tensor cores with NVFP4 block scaling
# (TransformerEngine's NVFP4BlockScaling recipe: 16-element blocks with E4M3 scales, Blackwell only; NVIDIA,
# "Pretraining Large Language Models with NVFP4", arXiv 2509.25149).  Codes are positions: append only.
PRECISION = ("bf16", "fp16", "fp8", "fp4")
OFFLOAD = ("none", "cpu")
# Virtual pipeline stages beyond the layers that a framework splitting layers unevenly may give the embedding and the
# loss alone (Megatron-Core's --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-split, or a
# --pipeline-model-parallel-layout with empty first and last virtual stages): space rule 5.
EMBEDDING_AND_LOSS_STAGES = 2
SCHEDULE = ("1f1b", "dualpipe")
INT_KEYS = ("tp", "pp", "cp", "ep", "vp", "zero", "mbs", "etp")
PLAN_KEYS = ("tp", "pp", "cp", "ep", "vp", "sp", "zero", "mbs", "recompute", "precision", "offload", "etp",
             "schedule")
# The keys every plans.json has written for each plan since the first release (etp and schedule came later; an
# older file's plan reads them as their defaults, etp = tp and 1F1B, which is what that release planned).
RECORDED_PLAN_KEYS = PLAN_KEYS[:PLAN_KEYS.index("etp")]
# Categorical axes are stored in a PlanBatch as integer codes into these tuples.
CATEGORIES: Mapping[str, tuple[str, ...]] = {"recompute": RECOMPUTE, "precision": PRECISION, "offload": OFFLOAD,
                                             "schedule": SCHEDULE}
# etp may be given as this word: expert tensor parallelism equal to tp (Megatron's default).
ETP_AS_TP = "tp"

# Documented defaults for plan keys left out of --plan (sp defaults to tp > 1, etp to tp).
PLAN_DEFAULTS: Mapping[str, Any] = {
    "tp": 1, "pp": 1, "cp": 1, "ep": 1, "vp": 1, "zero": 1, "mbs": 1,
    "recompute": "none", "precision": "bf16", "offload": "none", "etp": "tp", "schedule": "1f1b",
}


def _shown(key: str, value: Any, tp: int) -> bool:
    """Whether a plan key is written out: etp and schedule only where they differ from their defaults."""
    if key == "etp":
        return value != tp and value != ETP_AS_TP and value is not None
    if key == "schedule":
        return value != PLAN_DEFAULTS["schedule"]
    return True


def canonical_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Plan fields as plan strings write them: etp and schedule left out at their defaults."""
    return {k: v for k, v in fields.items() if _shown(k, v, fields.get("tp", 1))}


def resolved_fields(fields: Mapping[str, Any]) -> dict[str, Any]:
    """Plan fields with every key of the JSON ``plan`` object: etp as a number (``"tp"`` resolved), the
    schedule filled in."""
    out = dict(fields)
    if out.get("etp") in (None, ETP_AS_TP):
        out["etp"] = out.get("tp", 1)
    out.setdefault("schedule", PLAN_DEFAULTS["schedule"])
    return out


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
    etp: int | None = None  # expert tensor parallel; None (or "tp"): equal to tp
    schedule: str = "1f1b"

    def __post_init__(self) -> None:
        if isinstance(self.n_gpus, bool) or not isinstance(self.n_gpus, (int, np.integer)) or self.n_gpus < 1:
            raise ValueError(f"n_gpus >= 1 must hold, but got (n_gpus={self.n_gpus!r})")
        if self.etp is None or self.etp == ETP_AS_TP:
            object.__setattr__(self, "etp", self.tp)
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

    @property
    def expert_dp(self) -> int:
        """Expert data parallelism: the ranks of a stage over etp * ep (MoE parallel folding)."""
        return self.n_gpus // (self.pp * self.etp * self.ep)

    def as_dict(self) -> dict[str, Any]:
        """The JSON ``plan`` object: every plan key plus the derived dp."""
        out = {key: getattr(self, key) for key in PLAN_KEYS}
        out = {k: (int(v) if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v) for k, v in out.items()}
        out["dp"] = self.dp
        return out

    def as_string(self) -> str:
        parts = []
        for key in PLAN_KEYS:
            value = getattr(self, key)
            if not _shown(key, value, self.tp):
                continue
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
        if self.etp != self.tp:
            parts.append(f"ETP{self.etp}")
        parts.append(f"DP{self.dp}")
        if self.schedule != PLAN_DEFAULTS["schedule"]:
            parts.append(self.schedule.upper() if self.schedule != "dualpipe" else "DualPipe")
        return " ".join(parts)


def parse_bool(text: str, key: str) -> bool:
    lowered = text.strip().lower()
    if lowered in ("true", "1", "yes", "on"):
        return True
    if lowered in ("false", "0", "no", "off"):
        return False
    raise ValueError(f"{key} must be true or false, but got ({key}={text!r})")


# No parallel size or micro-batch exceeds the largest GPU count autotune plans for; a larger number is a typo,
# and refusing it here keeps it out of numpy's int64 arithmetic.
PLAN_INT_MAX = MAX_GPUS


def check_field(key: str, value: Any) -> None:
    """Raise ValueError unless ``value`` is a possible value of plan key ``key`` on its own."""
    if key == "etp" and (value is None or value == ETP_AS_TP):
        return
    if key in INT_KEYS:
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)):
            raise ValueError(f"{key} must be an integer, but got ({key}={value!r})")
        low, high = (0, 3) if key == "zero" else (1, PLAN_INT_MAX)
        if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not low <= value <= high:
            bound = "0 <= zero <= 3" if key == "zero" else f"1 <= {key} <= {PLAN_INT_MAX:,}"
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
    for item in comma_items(text, what="a plan"):
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
        if key == "etp" and raw == ETP_AS_TP:
            fields[key] = ETP_AS_TP
        elif key in INT_KEYS:
            fields[key] = _parse_int(raw, key)
        elif key == "sp":
            fields[key] = parse_bool(raw, key)
        else:
            fields[key] = raw
        check_field(key, fields[key])
    return fields


def _parse_int(raw: str, key: str) -> int:
    # ASCII digits only: Python's int() also reads other scripts' digits ('٢' as 2), which --gpus refuses
    if not raw.isascii():
        raise ValueError(f"{key} must be an integer in ASCII digits, but got ({key}={raw!r})")
    try:
        return int(raw)
    except ValueError:
        raise ValueError(f"{key} must be an integer, but got ({key}={raw!r})") from None


def plan_from_fields(fields: Mapping[str, Any], n_gpus: int) -> Plan:
    """Fill documented defaults and build a validated :class:`Plan`."""
    unknown = sorted(str(k) for k in fields if k not in PLAN_KEYS and k != "dp")
    if unknown:
        raise ValueError(f"unknown plan key(s) {', '.join(repr(k) for k in unknown)}; keys: {', '.join(PLAN_KEYS)} "
                         "(dp is derived)")
    values = {**PLAN_DEFAULTS, **{k: v for k, v in fields.items() if k != "dp"}}
    check_field("tp", values["tp"])  # before sp is derived from it
    values.setdefault("sp", values["tp"] > 1)
    if values.get("etp") == ETP_AS_TP:
        values["etp"] = None
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
    etp: np.ndarray
    schedule: np.ndarray

    @property
    def dp(self) -> np.ndarray:
        return self.n_gpus // (self.tp * self.pp * self.cp)

    @property
    def expert_dp(self) -> np.ndarray:
        """Ranks of a stage over etp * ep (0 where etp * ep does not divide them: an invalid plan)."""
        stage = self.n_gpus // self.pp
        width = self.etp * self.ep
        return np.where(stage % width == 0, stage // np.maximum(width, 1), 0)

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @classmethod
    def from_columns(cls, n_gpus: int, columns: Mapping[str, Iterable]) -> "PlanBatch":
        """Columns per plan key; ``etp`` may be missing or hold ``"tp"`` (equal to tp), ``schedule`` may be missing (1f1b)."""
        arrays = {}
        length = len(np.asarray(columns["tp"]))
        for key in PLAN_KEYS:
            if key == "etp":
                tp = np.asarray(columns["tp"], dtype=np.int64)
                raw = np.asarray(columns["etp"]) if "etp" in columns else None
                if raw is None:
                    arrays[key] = tp.copy()
                elif raw.dtype.kind in "iu":
                    arrays[key] = raw.astype(np.int64)
                else:  # "tp" (or None) means equal to tp
                    arrays[key] = np.array([t if v is None or v == ETP_AS_TP else int(v) for t, v in zip(tp, raw.tolist())],
                                           dtype=np.int64).reshape(tp.shape)
                continue
            values = columns[key] if key in columns or key != "schedule" else [PLAN_DEFAULTS["schedule"]] * length
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
