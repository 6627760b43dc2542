"""How far to trust an estimate: an expected error band per plan, from validated published runs.

The band comes from the validation residuals (``predicted / measured - 1``) of the
published training runs bundled with the package (``autotune/data/training_runs.csv``,
a copy of the shared data set with its source columns), predicted with the bundled
profiles exactly as ``autotune validate`` does.  The residuals are precomputed into
``autotune/data/validation_residuals.json`` (regenerate with ``python -m autotune.confidence``;
``tests/test_confidence.py`` fails when the file is stale), so that ``search`` and
``predict`` need no cost-model run to attach a band.

For a plan on a GPU type, the runs that speak for it are chosen in this order:

1. runs on the same GPU type with exactly the plan's *features* -- the parallel dimensions
   and settings in use: TP>1, PP>1, VP>1 (interleaving), CP>1, EP>1, ZeRO-3, fp8, offload;
2. otherwise runs on that GPU exercising every feature of the plan that some run on it
   exercised;
3. otherwise every run on that GPU type;
4. otherwise every run (no validated run on this GPU type).

A basis needs :data:`MIN_RUNS` runs to be used; the band is the 10th-90th percentile of its
signed errors (the range when it has fewer than :data:`PERCENTILE_MIN_RUNS`).  Features of
the plan that no validated run on the GPU exercised are listed as ``unvalidated`` (e.g.
``"CP>1 on h100-sxm5-80gb"``): the band says nothing about them.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path
from typing import Any, Iterable, Mapping

import numpy as np

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
RUNS_CSV = DATA_DIR / "training_runs.csv"
RESIDUALS_JSON = DATA_DIR / "validation_residuals.json"
MIN_RUNS = 3
PERCENTILE_MIN_RUNS = 10
BAND_PERCENTILES = (10.0, 90.0)

# Feature name -> test on a plan's fields (as in Plan.as_dict()).
FEATURES: Mapping[str, Any] = {
    "TP>1": lambda p: int(p.get("tp", 1)) > 1,
    "PP>1": lambda p: int(p.get("pp", 1)) > 1,
    "VP>1": lambda p: int(p.get("vp", 1)) > 1,
    "CP>1": lambda p: int(p.get("cp", 1)) > 1,
    "EP>1": lambda p: int(p.get("ep", 1)) > 1,
    "ZeRO-3": lambda p: int(p.get("zero", 0)) >= 3,
    "fp8": lambda p: p.get("precision") == "fp8",
    "offload": lambda p: str(p.get("offload", "none")) not in ("none", "0", "False"),
}


def plan_features(plan: Any) -> tuple[str, ...]:
    """The features (keys of :data:`FEATURES`) a plan uses; ``plan`` is a Plan or its ``as_dict()``."""
    fields = plan.as_dict() if hasattr(plan, "as_dict") else dict(plan)
    return tuple(name for name, test in FEATURES.items() if test(fields))


# ---------------------------------------------------------------------------------------------
# Building the residual table (at development time)


def build_table(csv_path: Path = RUNS_CSV) -> dict:
    """Validate the bundled runs with the bundled profiles and keep each row's residual and features."""
    from ..inputs.hardware import load_hardware
    from .runs import read_runs
    from .validation import validate_runs

    report = validate_runs(read_runs(csv_path), load_hardware)
    rows = []
    for r in report.rows:
        rows.append({
            "id": r.id,
            "source_group": r.source_group,
            "gpu": r.gpu.split(" (")[0],
            "features": list(plan_features(r.plan)),
            "error_pct": round(r.error_pct, 2),
        })
    return {
        "about": ("Validation residuals (predicted/measured - 1, %) of the bundled published training runs "
                  "(autotune/data/training_runs.csv) with the bundled hardware profiles, no calibration; "
                  "regenerate with `python -m autotune.confidence`."),
        "mape_pct": round(report.mape_pct, 2),
        "rows": rows,
    }


def write_table(path: Path = RESIDUALS_JSON, csv_path: Path = RUNS_CSV) -> dict:
    table = build_table(csv_path)
    path.write_text(json.dumps(table, indent=1) + "\n")
    return table


@functools.lru_cache(maxsize=1)
def load_table() -> dict:
    return json.loads(RESIDUALS_JSON.read_text())


# ---------------------------------------------------------------------------------------------
# Lookup


def _band(errors: np.ndarray) -> list[float]:
    if errors.size >= PERCENTILE_MIN_RUNS:
        lo, hi = np.percentile(errors, BAND_PERCENTILES)
    else:
        lo, hi = errors.min(), errors.max()
    return [round(float(lo), 1), round(float(hi), 1)]


def confidence(plan: Any, gpu: str, table: Mapping[str, Any] | None = None) -> dict:
    """Expected error band of a plan's estimate on ``gpu`` (a hardware profile name).

    Returns ``{"error_band_pct": [lo, hi], "basis": str, "n_runs": k, "unvalidated": [...]}``;
    an error is ``predicted / measured - 1`` in percent, so a band of [-10, 5] means that for
    validated runs like this one the estimate was between 10 % too low and 5 % too high.
    """
    table = load_table() if table is None else table
    rows = table["rows"]
    features = set(plan_features(plan))
    on_gpu = [r for r in rows if r["gpu"] == gpu]
    seen = set().union(*(r["features"] for r in on_gpu)) if on_gpu else set()
    if on_gpu:
        unvalidated = [f"{f} on {gpu}" for f in FEATURES if f in features and f not in seen]
    else:
        unvalidated = [f"any plan on {gpu}"]
    described = ", ".join(sorted(features, key=list(FEATURES).index)) or "no TP/PP/CP/EP, ZeRO-3 or fp8"
    exact = [r for r in on_gpu if set(r["features"]) == features]
    covered = features & seen
    wider = [r for r in on_gpu if covered <= set(r["features"])]
    if len(exact) >= MIN_RUNS:
        basis, how = exact, f"validated runs on {gpu} with the same features ({described})"
    elif covered and len(wider) >= MIN_RUNS:
        names = ", ".join(sorted(covered, key=list(FEATURES).index))
        basis, how = wider, f"validated runs on {gpu} that also use {names}"
    elif len(on_gpu) >= MIN_RUNS:
        basis, how = on_gpu, f"all validated runs on {gpu}"
    else:
        # Errors measured on other GPUs say nothing about this one: no band rather than a borrowed one.
        basis, how = [], f"no validated runs on {gpu}"
    errors = np.array([r["error_pct"] for r in basis], dtype=float)
    return {
        "error_band_pct": _band(errors) if errors.size else [None, None],
        "basis": how,
        "n_runs": int(errors.size),
        "unvalidated": unvalidated,
    }


def with_confidence(estimate: dict, plan: Any, gpu: str) -> dict:
    """``estimate`` (a JSON-ready estimate row) with a ``confidence`` entry added."""
    return {**estimate, "confidence": confidence(plan, gpu)}


def short_text(conf: Mapping[str, Any] | None) -> str:
    """Compact form for a table cell: ``-8..+12% (n=36)``, with ``!`` when a feature is unvalidated."""
    if not conf or conf.get("error_band_pct", [None])[0] is None:
        return "-"
    lo, hi = conf["error_band_pct"]
    text = f"{lo:+.0f}..{hi:+.0f}% n={conf['n_runs']}"
    return text + (" !" if conf.get("unvalidated") else "")


def sentence(conf: Mapping[str, Any] | None) -> str:
    """One line for ``predict``: the band, its basis, and what no validated run exercised."""
    if not conf or conf.get("error_band_pct", [None])[0] is None:
        basis = conf.get("basis") if conf else None
        return f"Expected error unknown: {basis or 'no validated runs'}; treat the estimate with care."
    lo, hi = conf["error_band_pct"]
    spread = "10th-90th percentile" if conf["n_runs"] >= PERCENTILE_MIN_RUNS else "range"
    text = (f"Expected error {lo:+.0f}% to {hi:+.0f}% (predicted vs measured, {spread} over "
            f"{conf['n_runs']} {conf['basis']}).")
    if conf.get("unvalidated"):
        text += " Not validated: no run with " + "; ".join(conf["unvalidated"]) + "."
    return text


def main(argv: Iterable[str] | None = None) -> None:
    table = write_table()
    print(f"wrote {RESIDUALS_JSON.name}: {len(table['rows'])} rows, MAPE {table['mape_pct']:.2f}%")


if __name__ == "__main__":
    main()
