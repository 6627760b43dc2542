"""Serve plans: one plan (frozen, validated) and many plans as numpy columns.

Two shapes of deployment (``mode``):

* **agg** (prefill and decode in the same engines): ``replicas`` identical engines, each of
  ``tp * pp * dp`` GPUs.  ``tp`` is tensor parallelism of attention (and of the dense MLP), ``pp``
  pipeline stages, ``dp`` the engine's own data parallelism: ``dp`` ranks behind one server
  (vLLM ``--data-parallel-size``, SGLang ``--dp-size``; for a MoE model the ranks share the
  experts: attention data parallelism).  ``ep`` splits the routed experts of one engine into
  ``ep`` groups; the rest of the engine's ``tp * dp`` GPUs split each expert (``moe_tp = tp * dp /
  ep``).  ``replicas`` (derived: GPUs / (tp * pp * dp)) are independent servers behind a router.
* **disagg** (prefill/decode disaggregation): a system of ``prefill_workers`` prefill engines
  and ``decode_workers`` decode engines, each pool with its own ``tp, pp, dp, ep``; the KV cache
  of each prompt moves from a prefill engine to a decode engine.  ``replicas`` copies of the
  whole system share the GPUs.

``weights`` is the weight precision the engine computes with (bf16, fp8, int8 W8A8, int4
weight-only, fp4 = NVFP4, mxfp4), ``kv`` the KV-cache dtype and ``max_batch`` the engine's limit on
sequences in flight (per engine: over all its ``dp`` ranks; the decode engines' in disagg).

The plan string and the JSON ``plan`` object use the same keys: agg plans
``mode, tp, pp, dp, ep, weights, kv, max_batch`` (+ the derived ``replicas``); disagg plans
``mode, prefill_workers, prefill_tp, prefill_pp, prefill_dp, prefill_ep, decode_workers,
decode_tp, ..., weights, kv, max_batch`` (+ ``replicas``).  A plan string with any ``prefill_`` or
``decode_`` key is a disagg plan; ``mode`` may be left out.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

import numpy as np

from ..errors import comma_items
from ..inputs.request import MAX_GPUS

# Weight precisions.  bf16/fp8/int8/fp4 run their GEMMs at that precision (W8A8, W4A4 NVFP4);
# int4 is weight-only (AWQ/GPTQ-style, one bf16 scale per group of 128) and computes in bf16;
# mxfp4 (OCP microscaling, 32-element blocks) runs on FP4 tensor cores where the GPU has them and
# weight-only elsewhere (gpt-oss on Hopper).
WEIGHTS = ("bf16", "fp8", "int8", "int4", "fp4", "mxfp4")
KV_DTYPES = ("bf16", "fp8")
MODES = ("agg", "disagg")
POOL_KEYS = ("workers", "tp", "pp", "dp", "ep")
SIDES = ("prefill", "decode")
AGG_KEYS = ("tp", "pp", "dp", "ep")
DISAGG_KEYS = tuple(f"{side}_{k}" for side in SIDES for k in POOL_KEYS)
COMMON_KEYS = ("weights", "kv", "max_batch")
SERVE_KEYS = ("mode", *AGG_KEYS, *DISAGG_KEYS, *COMMON_KEYS)  # every key a plan string may carry
SERVE_INT_KEYS = (*AGG_KEYS, *DISAGG_KEYS, "max_batch")
SERVE_CATEGORIES: Mapping[str, tuple[str, ...]] = {"weights": WEIGHTS, "kv": KV_DTYPES, "mode": MODES}
SERVE_DEFAULTS: Mapping[str, Any] = {"mode": "agg", "tp": 1, "pp": 1, "dp": 1, "ep": 1, "weights": "bf16", "kv": "bf16",
                                     "max_batch": 256}
# The tensor-core peak each weight precision computes at (a hardware profile key); int4 is weight-only.
COMPUTE_PRECISION: Mapping[str, str] = {"bf16": "bf16", "fp8": "fp8", "int8": "int8", "int4": "bf16", "fp4": "fp4",
                                        "mxfp4": "fp4"}
# Hardware peak a KV dtype needs (fp8 KV cache: the GPU must have fp8).
KV_PRECISION: Mapping[str, str] = {"bf16": "bf16", "fp8": "fp8"}


def recorded_serve_keys(plan: Mapping[str, Any]) -> tuple[str, ...]:
    """The keys a serving plans.json writes for ``plan``: its mode, its layout (one engine's, or each pool's) and the
    common keys but weights, which a plan may leave to its checkpoint (checkpoint.with_held_weights: the engine loads
    what the checkpoint holds).  A file of the first releases wrote no mode and no dp (every plan aggregated, one
    attention rank); a plan without a mode is read as theirs, or as a disaggregated one where it names pools."""
    common = tuple(k for k in COMMON_KEYS if k != "weights")
    if "mode" in plan:
        layout = DISAGG_KEYS if plan["mode"] == "disagg" else AGG_KEYS
        return ("mode", *layout, *common)
    if any(str(k).partition("_")[0] in SIDES for k in plan):
        return ("mode", *DISAGG_KEYS, *common)
    return ("tp", "pp", "ep", *common)


@dataclass(frozen=True)
class Pool:
    """One pool of identical engines of a disaggregated system: ``workers`` engines of tp*pp*dp GPUs."""

    workers: int = 1
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1

    def __post_init__(self) -> None:
        for key in POOL_KEYS:
            _check_int(key, getattr(self, key))
        if (self.tp * self.dp) % self.ep:
            raise ValueError(f"ep must divide tp*dp (the GPUs that hold one stage's experts), but got (ep={self.ep}, "
                             f"tp={self.tp}, dp={self.dp})")

    @property
    def gpus_per_engine(self) -> int:
        return self.tp * self.pp * self.dp

    @property
    def gpus(self) -> int:
        return self.workers * self.gpus_per_engine

    def layout(self) -> str:
        return _engine_layout(self.tp, self.pp, self.dp, self.ep)


def _engine_layout(tp: int, pp: int, dp: int, ep: int) -> str:
    parts = [f"TP{tp}"] if tp > 1 or dp == 1 else []
    if pp > 1:
        parts.append(f"PP{pp}")
    if dp > 1:
        parts.append(f"DP{dp}")
    if ep > 1:
        parts.append(f"EP{ep}")
    return " ".join(parts)


@dataclass(frozen=True)
class ServePlan:
    n_gpus: int
    tp: int = 1
    pp: int = 1
    dp: int = 1
    ep: int = 1
    weights: str = "bf16"
    kv: str = "bf16"
    max_batch: int = 256
    mode: str = "agg"
    prefill: Pool | None = None  # disagg only
    decode: Pool | None = None  # disagg only

    def __post_init__(self) -> None:
        for key in (*AGG_KEYS, *COMMON_KEYS, "mode"):
            check_serve_field(key, getattr(self, key))
        if self.mode == "disagg":
            if self.prefill is None or self.decode is None:
                raise ValueError("a disagg plan needs a prefill and a decode pool (prefill_* and decode_* keys)")
            if (self.tp, self.pp, self.dp, self.ep) != (1, 1, 1, 1):
                raise ValueError("a disagg plan gives each pool its own layout (prefill_tp, decode_tp, ...), but got "
                                 f"(tp={self.tp}, pp={self.pp}, dp={self.dp}, ep={self.ep})")
        else:
            if self.prefill is not None or self.decode is not None:
                raise ValueError("prefill/decode pools belong to mode=disagg, but got (mode=agg)")
            if (self.tp * self.dp) % self.ep:
                raise ValueError(f"ep must divide tp*dp (the GPUs that hold one stage's experts), but got "
                                 f"(ep={self.ep}, tp={self.tp}, dp={self.dp})")
        if self.n_gpus % self.gpus_per_replica:
            what = "tp*pp*dp" if self.mode == "agg" else "the GPUs of the prefill and decode pools"
            raise ValueError(f"{what} ({self.gpus_per_replica}) must divide the GPU count, but got (n_gpus={self.n_gpus})")

    @property
    def disaggregated(self) -> bool:
        return self.mode == "disagg"

    @property
    def gpus_per_replica(self) -> int:
        if self.mode == "disagg":
            return self.prefill.gpus + self.decode.gpus
        return self.tp * self.pp * self.dp

    @property
    def replicas(self) -> int:
        return self.n_gpus // self.gpus_per_replica

    def pools(self) -> tuple[Pool, Pool]:
        """(prefill pool, decode pool); an agg engine is both, one worker each."""
        if self.mode == "disagg":
            return self.prefill, self.decode
        engine = Pool(1, self.tp, self.pp, self.dp, self.ep)
        return engine, engine

    def keys(self) -> tuple[str, ...]:
        if self.mode == "disagg":
            return ("mode", *DISAGG_KEYS, *COMMON_KEYS)
        return ("mode", *AGG_KEYS, *COMMON_KEYS)

    def value(self, key: str) -> Any:
        side, _, name = key.partition("_")
        if side in SIDES and name in POOL_KEYS:
            return getattr(getattr(self, side), name)
        return getattr(self, key)

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {}
        for key in self.keys():
            v = self.value(key)
            out[key] = int(v) if isinstance(v, (int, np.integer)) else v
        out["replicas"] = self.replicas
        return out

    def as_string(self) -> str:
        return ",".join(f"{k}={v}" for k, v in self.as_dict().items())

    def layout(self) -> str:
        if self.mode == "disagg":
            p, d = self.prefill, self.decode
            text = f"{p.workers}P({p.layout()}) + {d.workers}D({d.layout()})"
            return text + (f" x{self.replicas}" if self.replicas > 1 else "")
        return _engine_layout(self.tp, self.pp, self.dp, self.ep) + f" x{self.replicas}"


# Larger sizes or batch limits are typos; refusing them keeps them out of numpy's int64 arithmetic.
SERVE_INT_MAX = MAX_GPUS


def _check_int(key: str, value: Any) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or not 1 <= value <= SERVE_INT_MAX:
        raise ValueError(f"1 <= {key} <= {SERVE_INT_MAX:,} must hold, but got ({key}={value!r})")


def check_serve_field(key: str, value: Any) -> None:
    if key in SERVE_INT_KEYS:
        _check_int(key, value)
    elif key in SERVE_CATEGORIES and value not in SERVE_CATEGORIES[key]:
        raise ValueError(f"{key} must be one of {', '.join(SERVE_CATEGORIES[key])}, but got ({key}={value!r})")


def parse_serve_fields(text: str) -> dict[str, Any]:
    """``"tp=4,weights=fp8,max_batch=64"`` -> typed fields; unknown keys are an error."""
    fields: dict[str, Any] = {}
    for item in comma_items(text, what="a plan"):
        if "=" not in item:
            raise ValueError(f"each plan entry must read key=value, but got ({item!r})")
        key, _, raw = (s.strip() for s in item.partition("="))
        if key in fields:
            raise ValueError(f"plan key {key!r} is given twice")
        if key == "replicas" or key in SERVE_INT_KEYS:
            if not raw.isascii():  # int() reads other scripts' digits ('٢' as 2); --gpus does not
                raise ValueError(f"{key} must be an integer in ASCII digits, but got ({key}={raw!r})")
            try:
                fields[key] = int(raw)
            except ValueError:
                raise ValueError(f"{key} must be an integer, but got ({key}={raw!r})") from None
        elif key in SERVE_CATEGORIES:
            fields[key] = raw.lower()
        else:
            raise ValueError(f"unknown serve plan key {key!r}; keys: {', '.join(k for k in SERVE_KEYS)} "
                             "(replicas is derived)")
        if key != "replicas":
            check_serve_field(key, fields[key])
    return fields


def serve_plan_from_fields(fields: Mapping[str, Any], n_gpus: int) -> ServePlan:
    """A plan from parsed fields (or a JSON ``plan`` object); defaults fill what is left out."""
    given = {k: v for k, v in fields.items() if k != "replicas"}
    unknown = [k for k in given if k not in SERVE_KEYS]
    if unknown:
        raise ValueError(f"unknown serve plan key {unknown[0]!r}; keys: {', '.join(SERVE_KEYS)}")
    if "mode" in given and given["mode"] not in MODES:
        raise ValueError(f"mode must be one of {', '.join(MODES)}, but got (mode={given['mode']!r})")
    pool_keys = [k for k in given if k.partition("_")[0] in SIDES]
    mode = given.get("mode") or ("disagg" if pool_keys else "agg")
    if mode == "disagg":
        stray = [k for k in given if k in AGG_KEYS]
        if stray:
            raise ValueError(f"a disagg plan gives each pool its own layout: use prefill_{stray[0]} and "
                             f"decode_{stray[0]}, not {stray[0]}")
        pools = {}
        for side in SIDES:
            for k in POOL_KEYS:  # named as the file or the flag names them (prefill_tp), before any conversion
                if f"{side}_{k}" in given:
                    check_serve_field(f"{side}_{k}", given[f"{side}_{k}"])
            pools[side] = Pool(**{k: int(given.get(f"{side}_{k}", 1)) for k in POOL_KEYS})
        values = {k: given.get(k, SERVE_DEFAULTS[k]) for k in COMMON_KEYS}
        plan = ServePlan(n_gpus=n_gpus, mode="disagg", prefill=pools["prefill"], decode=pools["decode"], **values)
    else:
        if pool_keys:
            raise ValueError(f"{pool_keys[0]} belongs to a disagg plan, but got (mode=agg)")
        values = {k: given.get(k, SERVE_DEFAULTS[k]) for k in (*AGG_KEYS, *COMMON_KEYS)}
        plan = ServePlan(n_gpus=n_gpus, **values)
    if "replicas" in fields and fields["replicas"] != plan.replicas:
        what = "n_gpus/(tp*pp*dp)" if mode == "agg" else "n_gpus/(GPUs of the prefill and decode pools)"
        raise ValueError(f"replicas is derived as {what} = {plan.replicas}, but got "
                         f"(replicas={fields['replicas']}); leave it out or fix the layout or --gpus")
    return plan


def parse_serve_plan(text: str, n_gpus: int) -> ServePlan:
    return serve_plan_from_fields(parse_serve_fields(text), n_gpus)


# --- many plans as columns ----------------------------------------------------------------------

POOL_COLUMNS = tuple(f"{s[0]}_{k}" for s in SIDES for k in POOL_KEYS)  # p_workers, p_tp, ..., d_ep
BATCH_COLUMNS = ("mode", *AGG_KEYS, *POOL_COLUMNS, *COMMON_KEYS)


@dataclass(frozen=True)
class ServePlanBatch:
    """Many serve plans as numpy columns (categoricals as int8 codes into SERVE_CATEGORIES).

    ``p_*`` and ``d_*`` hold the prefill and decode pools; for an agg plan both are its engine
    (one worker), so the cost model reads every plan the same way.  ``tp, pp, dp, ep`` hold the
    agg layout (for a disagg plan: its decode pool's).
    """

    n_gpus: int
    mode: np.ndarray
    tp: np.ndarray
    pp: np.ndarray
    dp: np.ndarray
    ep: np.ndarray
    p_workers: np.ndarray
    p_tp: np.ndarray
    p_pp: np.ndarray
    p_dp: np.ndarray
    p_ep: np.ndarray
    d_workers: np.ndarray
    d_tp: np.ndarray
    d_pp: np.ndarray
    d_dp: np.ndarray
    d_ep: np.ndarray
    weights: np.ndarray
    kv: np.ndarray
    max_batch: np.ndarray

    def __len__(self) -> int:
        return int(self.tp.shape[0])

    @property
    def disagg(self) -> np.ndarray:
        return self.mode == 1

    @property
    def gpus_per_replica(self) -> np.ndarray:
        agg = self.tp * self.pp * self.dp
        dis = self.p_workers * self.p_tp * self.p_pp * self.p_dp + self.d_workers * self.d_tp * self.d_pp * self.d_dp
        return np.where(self.disagg, dis, agg)

    @property
    def replicas(self) -> np.ndarray:
        return self.n_gpus // self.gpus_per_replica

    @classmethod
    def concat(cls, n_gpus: int, batches: Iterable["ServePlanBatch"]) -> "ServePlanBatch":
        """The plans of several batches (of one GPU count), in order."""
        batches = list(batches)
        return cls.from_columns(n_gpus, {k: np.concatenate([getattr(b, k) for b in batches]) for k in BATCH_COLUMNS})

    @classmethod
    def from_columns(cls, n_gpus: int, columns: Mapping[str, Iterable]) -> "ServePlanBatch":
        """Columns by name; ``mode`` and the pool columns may be left out (agg plans)."""
        arrays: dict[str, np.ndarray] = {}
        n = len(np.asarray(columns["tp"]))
        for key in ("mode", *AGG_KEYS, *COMMON_KEYS):
            if key not in columns:
                arrays[key] = np.zeros(n, np.int8) if key == "mode" else np.ones(n, np.int64)
                continue
            raw = columns[key]
            arr = np.asarray(list(raw) if not isinstance(raw, np.ndarray) else raw)
            if key in SERVE_CATEGORIES:
                if arr.dtype.kind in ("U", "S", "O"):
                    arr = np.array([SERVE_CATEGORIES[key].index(v) for v in arr], dtype=np.int8)
                arrays[key] = arr.astype(np.int8)
            else:
                arrays[key] = arr.astype(np.int64)
        disagg = arrays["mode"] == 1
        agg_pool = {"workers": np.ones(n, np.int64), "tp": arrays["tp"], "pp": arrays["pp"], "dp": arrays["dp"],
                    "ep": arrays["ep"]}
        for s in ("p", "d"):
            for k in POOL_KEYS:
                name = f"{s}_{k}"
                given = np.asarray(columns[name], dtype=np.int64) if name in columns else agg_pool[k]
                arrays[name] = np.where(disagg, given, agg_pool[k]).astype(np.int64)
        for k in AGG_KEYS:  # a disagg plan's agg columns read its decode pool
            arrays[k] = np.where(disagg, arrays[f"d_{k}"], arrays[k]).astype(np.int64)
        return cls(n_gpus=n_gpus, **arrays)

    @classmethod
    def from_plans(cls, plans: Iterable[ServePlan]) -> "ServePlanBatch":
        plans = list(plans)
        assert plans, "a ServePlanBatch needs at least one plan"
        columns: dict[str, list] = {k: [] for k in BATCH_COLUMNS}
        for p in plans:
            prefill, decode = p.pools()
            columns["mode"].append(p.mode)
            for k in AGG_KEYS:
                columns[k].append(getattr(p, k))
            for k in POOL_KEYS:
                columns[f"p_{k}"].append(getattr(prefill, k))
                columns[f"d_{k}"].append(getattr(decode, k))
            for k in COMMON_KEYS:
                columns[k].append(getattr(p, k))
        return cls.from_columns(plans[0].n_gpus, columns)

    def take(self, index: np.ndarray) -> "ServePlanBatch":
        return dataclasses.replace(self, **{k: getattr(self, k)[index] for k in BATCH_COLUMNS})

    def with_column(self, key: str, values: np.ndarray) -> "ServePlanBatch":
        return dataclasses.replace(self, **{key: np.asarray(values).astype(getattr(self, key).dtype)})

    def plan(self, i: int) -> ServePlan:
        common = {k: (SERVE_CATEGORIES[k][int(getattr(self, k)[i])] if k in SERVE_CATEGORIES else int(getattr(self, k)[i]))
                  for k in COMMON_KEYS}
        if int(self.mode[i]) == 1:
            pools = {side: Pool(**{k: int(getattr(self, f"{side[0]}_{k}")[i]) for k in POOL_KEYS}) for side in SIDES}
            return ServePlan(n_gpus=self.n_gpus, mode="disagg", **pools, **common)
        return ServePlan(n_gpus=self.n_gpus, **{k: int(getattr(self, k)[i]) for k in AGG_KEYS}, **common)

    def key_matrix(self) -> np.ndarray:
        """One row of integers per plan (for de-duplication)."""
        return np.stack([getattr(self, k).astype(np.int64) for k in BATCH_COLUMNS], axis=1)
