"""Persistent studies: storage URLs, and the problem a study was made for (its fingerprint).

A study in an Optuna storage (SQLite, PostgreSQL, a journal file) carries the whole problem
as a study user attribute, ``autotune.problem``: the model spec, the hardware profile (with
its efficiency parameters), the cluster, the workload, the concrete choices of every axis,
the space rules and the objectives.  ``autotune worker`` rebuilds the problem from it alone,
and a re-run of ``search`` / ``tune`` compares it with its own flags and says exactly what
differs.  This module holds no Optuna code (only ``autotune.search.optuna_search`` imports it).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping, Sequence

from ..errors import InputError
from ..inputs.loading import MAX_INTEGER as MAX_INT_OPTION
from ..inputs.framework import Framework, load_framework
from ..inputs.hardware import Cluster, hardware_to_mapping
from ..inputs.modelspec import model_from_mapping, model_to_mapping, without_launch_only
from ..inputs.request import recorded_hardware
from ..inputs import loading
from ..inputs.workload import TrainWorkload, tokens_problem
from ..training.problem import OBJECTIVES, Objective, TrainingProblem
from ..training.space import OPTIONAL_AXES, Rules, Space

FINGERPRINT_VERSION = 2  # 2: the framework is part of the problem


def parse_storage_url(url: str) -> tuple[str, str]:
    """``(kind, target)`` for a storage URL; kind is sqlite, postgresql, mysql or journal.

    ``journal:PATH`` (or ``journal:///abs/path``) is Optuna's journal file storage; every
    other URL is an SQLAlchemy database URL handed to Optuna's RDB storage.
    """
    text = (url or "").strip()
    if text.startswith("journal:"):
        path = text[len("journal:"):]
        if path.startswith("///"):
            path = path[2:]
        elif path.startswith("//"):
            raise InputError("write journal:PATH or journal:///absolute/path (no host part)", field="--storage")
        if not path:
            raise InputError("journal: needs a file path, e.g. journal:./study.log", field="--storage")
        return "journal", path
    for kind in ("sqlite", "postgresql", "mysql"):
        if text.startswith(kind + ":") or text.startswith(kind + "+"):
            if kind == "sqlite" and not text.startswith("sqlite:///"):
                raise InputError(f"an SQLite URL reads sqlite:///relative.db or sqlite:////absolute.db, but got {text!r}",
                                 field="--storage")
            return kind, text
    raise InputError(
        f"unknown storage {text!r}; use sqlite:///study.db, postgresql://user:password@host/db "
        "or journal:./study.log (Optuna's journal file)", field="--storage")


def sqlite_database(url: str) -> str | None:
    """The database file an SQLite URL names, as SQLAlchemy opens it (``%20`` decoded, a ``file:`` URI unwrapped);
    None for an in-memory database (``sqlite:///:memory:``, ``sqlite:///``, ``file::memory:``, ``mode=memory``),
    which is one process's own and gone when it exits."""
    from sqlalchemy.engine import make_url

    parsed = make_url(url.strip())
    database = parsed.database or ""
    if database.startswith("file:"):
        database = database[len("file:"):].split("?", 1)[0]
    mode = parsed.query.get("mode")
    if not database or database == ":memory:" or mode == "memory" or (isinstance(mode, tuple) and "memory" in mode):
        return None
    return database


def storage_file(url: str) -> Path | None:
    """The file behind an SQLite or journal storage URL (None: a database server, or SQLite in memory)."""
    kind, target = parse_storage_url(url)
    if kind == "journal":
        return Path(target)
    database = sqlite_database(url) if kind == "sqlite" else None
    return Path(database) if database is not None else None


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=_default))


def _default(value: Any) -> Any:
    if hasattr(value, "item"):  # numpy scalars
        return value.item()
    if isinstance(value, Mapping):
        return dict(value)
    if isinstance(value, (tuple, set, frozenset)):
        return list(value)
    raise TypeError(f"cannot store {type(value).__name__} in a study")


_OPTIONAL_WORKLOAD = {"moe_imbalance": 1.0, "moe_capacity_factor": None}
_LAUNCH_ONLY_HARDWARE = frozenset({"compute_capability"})


def fingerprint(problem: TrainingProblem, objectives: Sequence[Objective]) -> dict:
    """Everything that decides a trial's result, as plain JSON (stored on the study)."""
    return _jsonable({
        "version": FINGERPRINT_VERSION,
        "model": model_to_mapping(problem.model),
        # what the launch files need but no estimate reads is left out, so a study made before a profile
        # stated it goes on (the CUDA compute capability picks TransformerEngine's fp8 recipe only)
        "hardware": {k: v for k, v in hardware_to_mapping(problem.cluster.hardware).items()
                     if k not in _LAUNCH_ONLY_HARDWARE},
        "cluster": {"n_gpus": problem.cluster.n_gpus, "gpus_per_node": problem.cluster.gpus_per_node,
                    **({"scale_up_domain_gpus": problem.cluster.scale_up_domain_gpus}
                       if problem.cluster.scale_up_domain_gpus else {})},
        "workload": {k: v for k, v in dataclasses.asdict(problem.workload).items()
                     if not (k in _OPTIONAL_WORKLOAD and v == _OPTIONAL_WORKLOAD[k])},
        "space": {"name": problem.space.name, "choices": {k: list(v) for k, v in problem.choices.items()},
                  "rules": dataclasses.asdict(problem.rules)},
        "objectives": [o.name for o in objectives],
        "framework": {f.name: getattr(problem.framework, f.name) for f in dataclasses.fields(problem.framework)
                      if f.name not in ("sources", "description")},
        "memory_headroom": problem.memory_headroom,
    })


def problem_from_fingerprint(data: Mapping[str, Any], *, study: str = "") -> tuple[TrainingProblem, tuple[Objective, ...]]:
    """Rebuild the problem a study was made for (what ``autotune worker`` runs)."""
    where = f"study {study!r}" if study else "study"
    if not isinstance(data, Mapping) or data.get("version") != FINGERPRINT_VERSION:
        raise InputError(f"{where} was made by another autotune version (problem record version "
                         f"{data.get('version') if isinstance(data, Mapping) else None!r}, expected {FINGERPRINT_VERSION})",
                         field="--study")
    try:
        model = model_from_mapping(dict(data["model"]), source=where)
        hw = recorded_hardware(dict(data["hardware"]), source=where)
        # the counts and sizes as the command line takes them: a record edited to seq_len 1e300 (or n_gpus 1e300)
        # had its trials fail one by one while the worker said it finished
        for section, keys in (("cluster", ("n_gpus", "gpus_per_node")), ("workload", ("seq_len", "global_batch"))):
            for key in keys:
                loading.integer(data[section], key, source=where, section=section, maximum=MAX_INT_OPTION)
        problem = tokens_problem(data["workload"].get("tokens"), data["workload"]["seq_len"],
                                 data["workload"]["global_batch"])
        if problem:
            raise ValueError(f"workload.tokens {problem}")
        cluster = Cluster(hardware=hw, **data["cluster"])
        workload = TrainWorkload(**data["workload"])
        rules = Rules(**data["space"]["rules"])
        choices = {k: tuple(v) for k, v in data["space"]["choices"].items()}
        # Axes added after a record was made (etp, schedule) take the value older spaces searched.
        choices.update({k: v for k, v in OPTIONAL_AXES.items() if k not in choices})
        space = Space(name=data["space"]["name"], axes=choices, rules=rules, source=f"{where} (stored)")
        objectives = tuple(OBJECTIVES[n] for n in data["objectives"])
        if not objectives:  # a trial's value is one per objective: none had failed inside Optuna with a traceback
            raise ValueError("objectives is empty")
        traits = {k: (tuple(v) if isinstance(v, list) else v) for k, v in data["framework"].items()}
        missing = [f.name for f in dataclasses.fields(Framework) if f.name not in traits
                   and f.name not in ("description", "sources", "changes_applied")]
        if missing:  # traits added after the record was made: the profile's, at the stored version
            named = load_framework(f"{traits['name']}@{traits['version']}" if traits.get("version") else traits["name"])
            traits.update({k: getattr(named, k) for k in missing})
        framework = Framework(**traits, description="")
        headroom = float(data["memory_headroom"])
    except InputError as exc:
        detail = f"{exc.field}: {exc.message}" if exc.field else exc.message
        raise InputError(f"{where}: its stored problem cannot be read ({detail}); start a new study",
                         field="--study") from None
    except (KeyError, TypeError, ValueError, AttributeError) as exc:  # AttributeError: a section that is no mapping
        raise InputError(f"{where}: its stored problem cannot be read ({exc}); start a new study", field="--study") from None
    return TrainingProblem(model, cluster, workload, choices, rules, space, framework=framework,
                           memory_headroom=headroom), objectives


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, Mapping):
        out: dict[str, Any] = {}
        for k, v in value.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: value}


def _without_launch_only(record: Mapping[str, Any]) -> Mapping[str, Any]:
    """A problem record less the hardware and model fields no estimate reads, whichever release stored it (one
    stored compute_capability for a while)."""
    if not isinstance(record, Mapping):
        return record
    out = dict(record)
    hardware = record.get("hardware")
    if isinstance(hardware, Mapping) and _LAUNCH_ONLY_HARDWARE & set(hardware):
        out["hardware"] = {k: v for k, v in hardware.items() if k not in _LAUNCH_ONLY_HARDWARE}
    if "model" in record:
        out["model"] = without_launch_only(record["model"])
    return out


def differences(stored: Mapping[str, Any], current: Mapping[str, Any]) -> list[str]:
    """Human lines naming each field that differs: ``model.n_layers: study has 80, this run 32``."""
    a, b = _flatten(_jsonable(stored)), _flatten(_jsonable(current))
    lines = []
    for key in sorted(set(a) | set(b)):
        if a.get(key, "<absent>") != b.get(key, "<absent>"):
            lines.append(f"{key}: study has {a.get(key, '<absent>')!r}, this run {b.get(key, '<absent>')!r}")
    return lines


def check_same_problem(stored: Mapping[str, Any] | None, current: Mapping[str, Any], *, study: str) -> None:
    if stored is None:
        raise InputError(f"study {study!r} exists but was not made by autotune (no problem record); "
                         "choose another --study name", field="--study")
    diff = differences(_without_launch_only(stored), _without_launch_only(current))
    if diff:
        shown = "; ".join(diff[:8]) + (f"; and {len(diff) - 8} more" if len(diff) > 8 else "")
        chosen = ("framework.name:", "framework.version:", "framework.date:")  # what --framework NAME@VERSION picks
        if all(d.startswith("framework.") and not d.startswith(chosen) for d in diff):
            # the same flags, a framework profile that changed since (an autotune upgrade): no flag gives the old one
            raise InputError(f"study {study!r} was estimated with another version of its framework profile ({shown}), "
                             "so its trials and new ones would not compare; pass --new to replace it, or choose "
                             "another --study name", field="--study")
        raise InputError(f"study {study!r} was made for another problem: {shown}. Run with the study's flags to "
                         "continue it, pass --new to replace it, or choose another --study name", field="--study")


def plan_env(plan: Mapping[str, Any]) -> dict[str, str]:
    """The plan as ``AUTOTUNE_<KEY>`` environment variables (booleans as true/false)."""
    out = {}
    for key, value in plan.items():
        out[f"AUTOTUNE_{key.upper()}"] = ("true" if value else "false") if isinstance(value, bool) else str(value)
    return out
