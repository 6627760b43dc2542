"""A serving calibration file: the parameters ``autotune calibrate`` fitted on serving runs, per engine.

    schema: serving
    engines:
      vllm: {gemm: 0.62, weight_bandwidth: 0.88, ...}
      sglang: {...}

Every key is a ``ServingParams`` field inside its bounds; a field left out keeps the shipped value.
``--calibration FILE`` applies it to ``search``/``predict --workload serve`` and ``validate``.  A file that
``autotune calibrate`` wrote (it has a ``fit`` section) records the serving model's version
(``serving_model``): one fitted for another version is refused (its ``gemm`` meant another thing); a file
written by hand is read in the current meaning.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Mapping

import yaml

from ..errors import InputError, check_keys
from ..inputs import loading
from .calibrated import LEGACY, params_for
from .engines import release_key_problem
from .estimate import SERVING_MODEL_VERSION, SERVING_PARAM_BOUNDS, SERVING_PARAM_FIELDS, ServingParams


def check_serving_model(recorded: Mapping, *, source: str, field: str, redo: str) -> None:
    """Parameters recorded beside ``serving_model`` are read only by that version of the serving model: another
    version reads some of them differently (``gemm``), so it would re-price the plans; none recorded is older."""
    if "serving_model" not in recorded:
        raise InputError(f"records no serving_model: it was written before version {SERVING_MODEL_VERSION} of the "
                         "serving model, whose parameters this release reads differently (GEMM rates as a share of "
                         f"the GPU's measured ceiling), so it would price plans differently; {redo}", source=source,
                         field=field)
    version = recorded["serving_model"]
    number = isinstance(version, (int, float)) and not isinstance(version, bool)
    if not number or version != SERVING_MODEL_VERSION:
        fix = "upgrade autotune to read it" if number and version > SERVING_MODEL_VERSION else redo
        raise InputError(f"must be {SERVING_MODEL_VERSION}, the version of the serving model this release reads, but "
                         f"got {version!r}; {fix}", source=source, field=field)


def serving_params_from_mapping(raw: object, base: ServingParams, *, source: str, section: str,
                                complete: bool = False) -> ServingParams:
    """``base`` with the parameters of ``raw`` (a mapping of ServingParams fields to numbers inside their bounds);
    ``complete``: every field must be there (a plans.json records them all)."""
    if not isinstance(raw, dict):
        raise InputError("must map parameter names to numbers", source=source, field=section)
    check_keys(raw, frozenset(SERVING_PARAM_FIELDS), source=source, section=section)
    absent = [k for k in SERVING_PARAM_FIELDS if k not in raw]
    if complete and absent:
        raise InputError(f"has no {', '.join(map(repr, absent))}; rerun the search", source=source, field=section)
    values = {}
    for key in raw:
        lo, hi = SERVING_PARAM_BOUNDS[key]
        values[key] = loading.number(raw, key, source=source, section=section, positive=False, minimum=lo, maximum=hi)
    return base.replace(**values)


def load_serving_calibration(path: str | Path) -> dict[str, ServingParams]:
    source = str(path)
    if not source.strip():  # as a path '' is the working folder
        raise InputError("must not be empty: give the YAML file `autotune calibrate` wrote", field="--calibration")
    data = loading.read_mapping(Path(path))  # duplicate keys refused, 6e-1 read as a number
    if data.get("schema") != "serving":
        raise InputError("is not a serving calibration (schema: serving), so it cannot go to --calibration of a "
                         "serving command; fit one with `autotune calibrate SERVING_RUNS.csv --out FILE` (a training "
                         "overlay goes to training commands)", source=source, field="schema")
    check_keys(data, frozenset({"schema", "engines", "source", "fit", "serving_model"}), source=source)
    # notes on the fit, written by `autotune calibrate`: not read, but of the kind it writes
    loading.text(data, "source", source=source, default=None)
    if data.get("fit") is not None and not isinstance(data["fit"], dict):
        raise InputError(f"must be a mapping (notes on the fit), but got {data['fit']!r}", source=source, field="fit")
    if "fit" in data or "serving_model" in data:
        check_serving_model(data, source=source, field="serving_model",
                            redo="refit it with `autotune calibrate RUNS.csv --out FILE`")
    engines = data.get("engines")
    if not isinstance(engines, dict) or not engines:
        raise InputError("must map engine names to parameter mappings", source=source, field="engines")
    out: dict[str, ServingParams] = {}
    for engine, raw in engines.items():
        section = f"engines.{engine}"
        problem = None if engine in LEGACY else release_key_problem(str(engine))
        if problem:  # a family (vllm), or a release of one autotune knows (trtllm-0.15), as calibrate keys them
            raise InputError(problem, source=source, field=section)
        out[str(engine)] = serving_params_from_mapping(raw, params_for(str(engine)), source=source, section=section)
    return out


def _finite_or_none(value):
    """JSON has no NaN: a metric a fit could not compute (a group without finite rows) is written as null."""
    if isinstance(value, dict):
        return {k: _finite_or_none(v) for k, v in value.items()}
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def serving_calibration_text(table: Mapping[str, ServingParams], *, source: str, fit: Mapping | None = None,
                             as_json: bool = False) -> str:
    """The overlay file: YAML with a comment header, or JSON (``as_json``, for an ``--out`` ending in .json, which
    ``--calibration`` then reads as JSON)."""
    doc = {"schema": "serving", "serving_model": SERVING_MODEL_VERSION, "source": source,
           "engines": {e: {k: round(v, 5) for k, v in p.as_dict().items()} for e, p in sorted(table.items())}}
    if fit:
        doc["fit"] = dict(fit)
    if as_json:
        return json.dumps(_finite_or_none(doc), indent=2) + "\n"
    header = ("# Serving parameters fitted by `autotune calibrate` (scipy least squares, soft-L1 on relative errors).\n"
              "# Apply with --calibration FILE (search/predict --workload serve, validate).\n")
    return header + yaml.safe_dump(doc, sort_keys=False)
