"""How far to trust an estimate: an expected error band per plan, from validated published runs.

The band comes from *held-out* residuals (``predicted / measured - 1``) of the published
training runs bundled with the package (``autotune/data/training_runs.csv``, a copy of the
shared data set with its source columns): each source group is predicted on the user's path
(``estimate_training`` with the row's framework) by a calibration fitted without that group
(:func:`autotune.training.calibration.fit`, leave-one-source-group-out), so a band says how far off a
*new* source was, not how well the fit matches its own rows.  ``source_group`` only groups
rows for that cross-validation; it never enters a prediction.  The residuals are precomputed
into ``autotune/data/validation_residuals.json`` (regenerate with ``python -m autotune.training.confidence``,
a few minutes; ``tests/test_confidence.py`` fails when the cost model, the profiles or the
runs changed since), so that ``search`` and ``predict`` need no cost-model run to attach a band.
Its ``coverage`` is the share of rows whose held-out error falls inside the band built from the
*other* groups' residuals -- the honest check that a nominal 80% band holds about 80%.

A plan of an MoE model, or with expert parallelism (EP>1), is judged by the published MoE runs instead
(``autotune/data/moe_training_runs.csv``, marked ``moe`` in the table): no calibration is fitted to them, so their
errors are held out as they stand, and dense runs say little about a MoE plan's dispatch and expert GEMMs (nor MoE
runs about a dense plan).

For a plan on a GPU type, the runs that speak for it are chosen in this order, among the runs
on the same silicon (``silicon``: the A100 40/80 GB, or the H100 SXM, its 96 GB 500 W variant and
the H200, count as one):

1. runs with exactly the plan's *features* -- the parallel dimensions and settings in use:
   TP>1, PP>1, VP>1 (interleaving), CP>1, EP>1, ZeRO-3, fp8, offload;
2. otherwise runs exercising every feature of the plan that some run on that silicon exercised;
3. otherwise every run on that silicon;
4. otherwise no band (errors on other silicon say nothing about this GPU).

A basis needs :data:`MIN_RUNS` runs from :data:`MIN_SOURCE_GROUPS` source groups to be used; the
band is the 10th-90th percentile of its signed held-out errors with every source group weighing the
same (the range when it has fewer than :data:`PERCENTILE_MIN_RUNS` runs).  Features of
the plan that no validated run on the GPU exercised are listed as ``unvalidated`` (e.g.
``"CP>1 on h100-sxm5-80gb"``): the band says nothing about them.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import numpy as np

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
RUNS_CSV = DATA_DIR / "training_runs.csv"
# Published MoE runs with expert parallelism (``autotune validate --bundled moe-training``). No calibration is fitted
# to them, so their errors are held out as they stand; they speak for plans with EP>1, the dense runs for the rest.
MOE_RUNS_CSV = DATA_DIR / "moe_training_runs.csv"
RESIDUALS_JSON = DATA_DIR / "validation_residuals.json"
MIN_RUNS = 3
MIN_SOURCE_GROUPS = 3
PERCENTILE_MIN_RUNS = 10
BAND_PERCENTILES = (10.0, 90.0)

# Feature name -> test on a plan's fields (as in Plan.as_dict()).
FEATURES: Mapping[str, Any] = {
    "TP>1": lambda p: int(p.get("tp", 1)) > 1,
    "PP>1": lambda p: int(p.get("pp", 1)) > 1,
    "VP>1": lambda p: int(p.get("vp", 1)) > 1,
    "CP>1": lambda p: int(p.get("cp", 1)) > 1,
    "EP>1": lambda p: int(p.get("ep", 1)) > 1,
    "ETP!=TP": lambda p: "etp" in p and int(p["etp"]) != int(p.get("tp", 1)),
    "DualPipe": lambda p: p.get("schedule", "1f1b") == "dualpipe",
    "ZeRO-3": lambda p: int(p.get("zero", 0)) >= 3,
    "fp8": lambda p: p.get("precision") == "fp8",
    "fp4": lambda p: p.get("precision") == "fp4",
    "offload": lambda p: str(p.get("offload", "none")) not in ("none", "0", "False"),
}


def plan_features(plan: Any) -> tuple[str, ...]:
    """The features (keys of :data:`FEATURES`) a plan uses; ``plan`` is a Plan or its ``as_dict()``."""
    fields = plan.as_dict() if hasattr(plan, "as_dict") else dict(plan)
    return tuple(name for name, test in FEATURES.items() if test(fields))


# ---------------------------------------------------------------------------------------------
# Building the residual table (at development time)


_REPO = Path(__file__).resolve().parent.parent  # the package folder
# What the held-out residuals depend on: the runs, the cost model, the path from a row to a
# prediction, the calibration, and every bundled profile.
_DIGEST_GLOBS = ("data/training_runs.csv", "data/moe_training_runs.csv", "costmodel/*.py", "training/estimate.py", "training/memory.py",
                 "training/step_time.py", "training/geometry.py", "training/plan.py", "training/space.py",
                 "training/runs.py", "training/validation.py", "training/calibration.py", "inputs/framework.py",
                 "inputs/hardware.py", "inputs/modelspec.py")


def inputs_digest() -> str:
    """SHA-256 over the files the residual table depends on (source files and bundled profiles)."""
    from ..inputs.resources import bundled_dir

    files = sorted(p for g in _DIGEST_GLOBS for p in _REPO.glob(g))
    files += sorted(bundled_dir("hardware").glob("*.yaml")) + sorted(bundled_dir("frameworks").glob("*.yaml"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(path.name.encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


def build_table(csv_path: Path = RUNS_CSV, moe_csv_path: Path | None = MOE_RUNS_CSV) -> dict:
    """Held-out residuals of the bundled runs: each source group predicted by a fit without it; then the MoE runs
    (``moe``), which no fit sees."""
    from ..inputs.hardware import load_hardware
    from .calibration import fit
    from .runs import read_runs
    from .validation import validate_runs

    runs = read_runs(csv_path)
    report = validate_runs(runs, load_hardware)
    held = fit(runs, load_hardware, logo=True).held_out
    rows = []
    for r in report.rows:
        rows.append({
            "id": r.id,
            "source_group": r.source_group,
            "gpu": r.gpu,
            "framework": r.framework,
            "features": list(plan_features(r.plan)),
            "error_pct": round(held[r.id], 2),
            "in_sample_error_pct": round(r.error_pct, 2),
        })
    dense_rows = list(rows)
    if moe_csv_path is not None:
        moe = validate_runs(read_runs(moe_csv_path), load_hardware)
        for r in moe.rows:
            rows.append({"id": r.id, "source_group": r.source_group, "gpu": r.gpu, "framework": r.framework,
                         "features": list(plan_features(r.plan)), "error_pct": round(r.error_pct, 2),
                         "in_sample_error_pct": round(r.error_pct, 2), "moe": True})
    table = {
        "about": ("Held-out validation residuals (predicted/measured - 1, %) of the bundled published training runs "
                  "(autotune/data/training_runs.csv): each source group predicted with the bundled profiles refitted "
                  "without it (leave-one-source-group-out); in_sample_error_pct is the bundled profiles' own error. Rows "
                  "marked moe are the MoE runs (autotune/data/moe_training_runs.csv), which no fit sees. "
                  "Regenerate with `python -m autotune.training.confidence`."),
        "inputs_sha256": inputs_digest(),
        "mape_pct": round(report.mape_pct, 2),
        "held_out_mape_pct": round(float(np.mean([abs(r["error_pct"]) for r in dense_rows])), 2),
        "moe_mape_pct": (round(float(np.mean([abs(r["error_pct"]) for r in rows if r.get("moe")])), 2)
                         if len(rows) > len(dense_rows) else None),
        "rows": rows,
    }
    table["coverage"] = band_coverage(table)
    return table


def band_coverage(table: Mapping[str, Any]) -> dict:
    """Share of rows whose held-out error lies inside the band built from the other source groups' rows.

    Each row's band is looked up exactly as for a user's plan (its GPU and features), in the table
    without the row's own source group -- the position of a run from a new source.
    """
    rows = table["rows"]
    inside = banded = 0
    hits: list[tuple[Mapping[str, Any], int]] = []
    by_group: dict[str, list[int]] = {}
    for r in rows:
        others = {**table, "rows": [o for o in rows if o["source_group"] != r["source_group"]]}
        conf = confidence_for(r["features"], r["gpu"], others, moe_model=bool(r.get("moe")))
        lo, hi = conf["error_band_pct"]
        if lo is None:
            continue
        banded += 1
        hit = int(lo <= r["error_pct"] <= hi)
        inside += hit
        hits.append((r, hit))
        by_group.setdefault(r["source_group"], []).append(hit)
    moe_hits = [h for r, h in hits if r.get("moe")]
    return {
        "nominal_pct": BAND_PERCENTILES[1] - BAND_PERCENTILES[0],
        "rows_with_band": banded,
        "rows_without_band": len(rows) - banded,
        "inside_pct": round(100.0 * inside / banded, 1) if banded else None,
        # the MoE runs' bands alone (they judge expert-parallel plans): what the band of such a plan holds
        "moe_inside_pct": round(100.0 * sum(moe_hits) / len(moe_hits), 1) if moe_hits else None,
        "by_source_group": {g: round(100.0 * sum(v) / len(v), 1) for g, v in by_group.items()},
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


def _band(errors: np.ndarray, groups: Sequence[str] | None = None) -> list[float]:
    """10th-90th percentile of ``errors``, each source group weighing the same (its rows share one
    bias, and a new run comes from a new source); the range when there are few rows."""
    if errors.size < PERCENTILE_MIN_RUNS:
        lo, hi = errors.min(), errors.max()
    else:
        groups = list(groups) if groups is not None else ["?"] * errors.size
        counts = {g: groups.count(g) for g in set(groups)}
        weights = np.array([1.0 / counts[g] for g in groups])
        order = np.argsort(errors, kind="stable")
        e, w = errors[order], weights[order]
        quantile = (np.cumsum(w) - 0.5 * w) / w.sum()
        lo, hi = (np.interp(q / 100.0, quantile, e) for q in BAND_PERCENTILES)
    return [round(float(lo), 1), round(float(hi), 1)]


def confidence(plan: Any, gpu: str, table: Mapping[str, Any] | None = None, *, moe_model: bool = False) -> dict:
    """Expected error band of a plan's estimate on ``gpu`` (a hardware profile name).

    Returns ``{"error_band_pct": [lo, hi], "basis": str, "n_runs": k, "unvalidated": [...]}``;
    an error is ``predicted / measured - 1`` in percent, so a band of [-10, 5] means that for
    validated runs like this one, predicted with their source held out of the calibration, the
    estimate was between 10 % too low and 5 % too high.
    """
    return confidence_for(plan_features(plan), gpu, table, moe_model=moe_model)


def silicon(gpu: str) -> str:
    """The silicon family a GPU profile belongs to (its own name without one): runs on the A100 40 GB
    and 80 GB, or on the H100 SXM, its 96 GB 500 W variant and the H200, speak for each other."""
    from .calibration import SILICON_FAMILIES

    return SILICON_FAMILIES.get(gpu, gpu)


def confidence_for(plan_feature_names: Iterable[str], gpu: str, table: Mapping[str, Any] | None = None, *,
                   moe_model: bool = False) -> dict:
    """:func:`confidence` for a plan given by its features (keys of :data:`FEATURES`).

    The basis is the narrowest of: runs on the GPU's silicon with the same features, runs using the
    features some such run used, all runs on that silicon -- that holds :data:`MIN_RUNS` runs from
    at least :data:`MIN_SOURCE_GROUPS` source groups, because a source's runs share its biases and
    a band from one source says nothing about the next.
    """
    table = load_table() if table is None else table
    features = set(plan_feature_names)
    # A plan of an MoE model (``moe_model``) or with expert parallelism is judged by the MoE runs, any other by the
    # dense ones: an MoE model at EP1 had borrowed the dense runs' band, though no dense run has its router, its
    # token shuffles or its per-expert GEMMs.
    moe = "EP>1" in features or moe_model
    rows = [r for r in table["rows"] if bool(r.get("moe")) == moe]
    family = silicon(gpu)
    on_gpu = [r for r in rows if silicon(r["gpu"]) == family]
    seen = set().union(*(r["features"] for r in on_gpu)) if on_gpu else set()
    if on_gpu:
        unvalidated = [f"{f} on {gpu}" for f in FEATURES if f in features and f not in seen]
    else:
        unvalidated = [f"any plan on {gpu}"]
    if moe and "EP>1" not in features and on_gpu and not any("EP>1" not in r["features"] for r in on_gpu):
        unvalidated.insert(0, f"EP=1 for an MoE model on {gpu}")
    described = ", ".join(sorted(features, key=list(FEATURES).index)) or "no TP/PP/CP/EP, ZeRO-3 or fp8"
    exact = [r for r in on_gpu if set(r["features"]) == features]
    covered = features & seen
    wider = [r for r in on_gpu if covered <= set(r["features"])]
    where = gpu if family == gpu else f"{gpu} ({family} silicon)"

    def enough(basis: list) -> bool:
        return len(basis) >= MIN_RUNS and len({r["source_group"] for r in basis}) >= MIN_SOURCE_GROUPS

    if enough(exact):
        basis, how = exact, f"validated runs on {where} with the same features ({described})"
    elif covered and enough(wider):
        names = ", ".join(sorted(covered, key=list(FEATURES).index))
        basis, how = wider, f"validated runs on {where} that also use {names}"
    elif enough(on_gpu):
        basis, how = on_gpu, f"runs, all those validated on {where}"
    else:
        # Errors measured on other GPUs say nothing about this one: no band rather than a borrowed one.
        basis, how = [], (f"no validated runs on {where}" if not on_gpu else
                          f"too few sources validated on {where} (fewer than {MIN_SOURCE_GROUPS})")
    errors = np.array([r["error_pct"] for r in basis], dtype=float)
    return {
        "error_band_pct": _band(errors, [r["source_group"] for r in basis]) if errors.size else [None, None],
        "basis": how,
        "n_runs": int(errors.size),
        "unvalidated": unvalidated,
        "moe": moe,
        # how often such a band held a run from a source it never saw (nominal 80%), said with the band
        "held_pct": (table.get("coverage") or {}).get("moe_inside_pct" if moe else "inside_pct"),
    }


def with_confidence(estimate: dict, plan: Any, gpu: str, *, moe_model: bool = False,
                    calibration: str | None = None) -> dict:
    """``estimate`` (a JSON-ready estimate row) with a ``confidence`` entry added (``moe_model``: the model has
    experts, whatever the plan's ep; ``calibration``: the --calibration overlay the estimate used, whose own error
    the bundled band does not describe)."""
    conf = confidence(plan, gpu, moe_model=moe_model)
    if calibration is not None:
        conf["calibration"] = calibration
    return {**estimate, "confidence": conf}


def _signed(pct: float) -> str:
    """A whole percent with its sign, never "-0" (a band's -0.3% reads +0)."""
    return f"{int(round(pct)):+d}"


def short_text(conf: Mapping[str, Any] | None) -> str:
    """Compact form for a table cell: ``-8..+12% (n=36)``, with ``!`` when a feature is unvalidated."""
    if not conf or conf.get("error_band_pct", [None])[0] is None:
        return "-"
    lo, hi = conf["error_band_pct"]
    text = f"{_signed(lo)}..{_signed(hi)}% n={conf['n_runs']}"
    return text + (" !" if conf.get("unvalidated") else "")


def sentence(conf: Mapping[str, Any] | None) -> str:
    """One line for ``predict``: the band, its basis, and what no validated run exercised."""
    if not conf or conf.get("error_band_pct", [None])[0] is None:
        basis = conf.get("basis") if conf else None
        return f"Expected error unknown: {basis or 'no validated runs'}; treat the estimate with care."
    lo, hi = conf["error_band_pct"]
    spread = "10th-90th percentile" if conf["n_runs"] >= PERCENTILE_MIN_RUNS else "range"
    held = ("MoE runs no calibration is fitted to" if conf.get("moe")
            else "each predicted with its source held out of the calibration")
    text = (f"Expected error {_signed(lo)}% to {_signed(hi)}% (predicted vs measured, {spread} over "
            f"{conf['n_runs']} {conf['basis']}, {held}).")
    if conf.get("moe") and conf.get("held_pct") is not None:
        text += (f" Bands from the MoE runs held {conf['held_pct']:.0f}% of runs from a source left out "
                 f"(nominal {BAND_PERCENTILES[1] - BAND_PERCENTILES[0]:.0f}%).")
    if conf.get("unvalidated"):
        text += " Not validated: no run with " + "; ".join(conf["unvalidated"]) + "."
    if conf.get("calibration"):
        text += (f" These are the bundled calibration's errors: with --calibration {conf['calibration']} they do not "
                 "describe this estimate (`autotune calibrate` reports that fit's held-out error).")
    return text


def main(argv: Iterable[str] | None = None) -> None:
    table = write_table()
    cov = table["coverage"]
    print(f"wrote {RESIDUALS_JSON.name}: {len(table['rows'])} rows, MAPE {table['mape_pct']:.2f}% in sample, "
          f"{table['held_out_mape_pct']:.2f}% held out; band coverage {cov['inside_pct']}% of "
          f"{cov['rows_with_band']} rows (nominal {cov['nominal_pct']:.0f}%)")


if __name__ == "__main__":
    main()
