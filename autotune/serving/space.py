"""The serving search space (search_spaces/serve.yaml): axes, validity rules, exact enumeration."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Mapping

import numpy as np

from ..errors import InputError, check_keys
from ..inputs import loading
from ..inputs.hardware import Cluster
from ..inputs.modelspec import ModelSpec
from ..inputs.resources import bundled_dir
from .plan import (
    COMPUTE_PRECISION,
    KV_PRECISION,
    SERVE_CATEGORIES,
    SERVE_KEYS,
    ServePlanBatch,
    check_serve_field,
)

REASONS: tuple[str, ...] = (
    "valid",
    "tp*pp does not divide the GPU count",
    "tp spans more than one node",
    "heads not divisible by tp",
    "pipeline stages exceed layers",
    "ep > 1 on a dense model",
    "experts not divisible by ep",
    "weight precision not supported by the GPU",
    "KV-cache dtype not supported by the GPU",
)


@dataclass(frozen=True)
class ServeSpace:
    name: str
    axes: Mapping[str, tuple]
    source: str = ""

    def fixed(self, fixes: Mapping[str, Any]) -> "ServeSpace":
        axes = dict(self.axes)
        for key, value in fixes.items():
            axes[key] = (value,)
        return ServeSpace(self.name, axes, self.source)


def serve_space_from_mapping(data: dict, *, source: str) -> ServeSpace:
    check_keys(data, frozenset({"name", "axes", "description"}), source=source)
    raw_axes = data.get("axes")
    if not isinstance(raw_axes, dict):
        raise InputError("must map each serve plan key to a list of choices", source=source, field="axes")
    check_keys(raw_axes, frozenset(SERVE_KEYS), source=source, section="axes")
    axes: dict[str, tuple] = {}
    for key in SERVE_KEYS:
        raw = raw_axes.get(key)
        if not isinstance(raw, list) or not raw:
            raise InputError(f"must be a non-empty list of choices, e.g. {key}: [1, 2]", source=source, field=f"axes.{key}")
        values = []
        for v in raw:
            if (key == "ep" and v == "tp") or (key == "max_batch" and v == "fit"):
                values.append(v)
                continue
            if key in SERVE_CATEGORIES and isinstance(v, str):
                v = v.lower()
            try:
                check_serve_field(key, v)
            except ValueError as exc:
                hint = " (or tp)" if key == "ep" else " (or fit)" if key == "max_batch" else ""
                raise InputError(f"{exc}{hint}", source=source, field=f"axes.{key}") from None
            values.append(v)
        axes[key] = tuple(dict.fromkeys(values))
    return ServeSpace(loading.text(data, "name", source=source, default=Path(source).stem), axes, source)


def load_serve_space(path: str | None) -> ServeSpace:
    if path is None:
        default = bundled_dir("search_spaces") / "serve.yaml"
        return serve_space_from_mapping(loading.read_mapping(default), source="search_spaces/serve.yaml")
    return serve_space_from_mapping(loading.read_mapping(Path(path)), source=path)


def rejection_reasons(model: ModelSpec, cluster: Cluster, plans: ServePlanBatch) -> np.ndarray:
    """Reason code per plan (index into REASONS); 0 for a runnable plan. The first failing rule wins."""
    hw = cluster.hardware
    tp, pp, ep = plans.tp, plans.pp, plans.ep
    weights_ok = np.array([hw.supports(COMPUTE_PRECISION[w]) for w in SERVE_CATEGORIES["weights"]])
    kv_ok = np.array([hw.supports(KV_PRECISION[k]) for k in SERVE_CATEGORIES["kv"]])
    experts = model.moe.n_experts if model.moe else 1
    checks = {
        1: cluster.n_gpus % (tp * pp) != 0,
        2: tp > cluster.gpus_per_node,
        3: model.n_heads % tp != 0,
        4: pp > model.n_layers,
        5: (ep > 1) & (model.moe is None),
        6: (model.moe is not None) & (experts % ep != 0),
        7: ~weights_ok[plans.weights],
        8: ~kv_ok[plans.kv],
    }
    reasons = np.zeros(len(plans), dtype=np.int16)
    for code in sorted(checks, reverse=True):
        reasons[np.asarray(checks[code], dtype=bool)] = code
    return reasons


@dataclass(frozen=True)
class ServeEnumeration:
    plans: ServePlanBatch
    space_size: int
    rejected: Mapping[str, int]
    fit_batch: bool  # the space asked for the KV-cache-bound batch as a max_batch choice


def enumerate_serve(model: ModelSpec, cluster: Cluster, space: ServeSpace) -> ServeEnumeration:
    """Every valid plan of the space (``max_batch: fit`` is resolved later, per layout)."""
    axes = dict(space.axes)
    fit_batch = "fit" in axes["max_batch"]
    batches = tuple(v for v in axes["max_batch"] if v != "fit") or (1,)
    ep_choices = axes["ep"]
    tp_choices = axes["tp"]
    rows = []
    for tp in tp_choices:
        eps = sorted({tp if e == "tp" else e for e in ep_choices})
        for pp in axes["pp"]:
            for ep in eps:
                for w in axes["weights"]:
                    for kv in axes["kv"]:
                        for b in batches:
                            rows.append((tp, pp, ep, w, kv, b))
    columns = {k: [r[i] for r in rows] for i, k in enumerate(SERVE_KEYS)}
    # ep other than 1 or tp is not a plan: drop silently (the axis says "tp").
    batch = ServePlanBatch.from_columns(cluster.n_gpus, columns)
    keep_ep = (batch.ep == 1) | (batch.ep == batch.tp)
    batch = batch.take(np.flatnonzero(keep_ep))
    reasons = rejection_reasons(model, cluster, batch)
    counts: dict[str, int] = {}
    for code, count in zip(*np.unique(reasons[reasons > 0], return_counts=True)):
        counts[REASONS[code]] = int(count)
    return ServeEnumeration(batch.take(np.flatnonzero(reasons == 0)), len(rows), counts, fit_batch)
