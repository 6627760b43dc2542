"""Confidence per plan: the bundled residual table and the error band looked up from it."""

import json

import pytest

from autotune.training import confidence as conf
from autotune.training.plan import Plan

TABLE = {
    "rows": [
        {"id": f"A{i}", "source_group": f"g{i}", "gpu": "gpu-a", "features": ["TP>1"], "error_pct": e}
        for i, e in enumerate([-10.0, -5.0, 0.0, 5.0])
    ] + [
        {"id": "B0", "source_group": "g", "gpu": "gpu-a", "features": [], "error_pct": 20.0},
        {"id": "C0", "source_group": "h", "gpu": "gpu-b", "features": ["ZeRO-3"], "error_pct": -30.0},
    ],
}


def test_bundled_residual_table_is_up_to_date():
    """The shipped JSON must come from the current runs, cost model and profiles.

    Rebuilding it takes minutes (a calibration per held-out source group), so the test checks the
    digest of everything it depends on, and the in-sample residuals, which are cheap.  Regenerate
    with `python -m autotune.training.confidence` after changing any of them.
    """
    from autotune.inputs.hardware import load_hardware
    from autotune.training.runs import read_runs
    from autotune.training.validation import validate_runs

    assert conf.RUNS_CSV.is_file() and conf.RESIDUALS_JSON.is_file()
    shipped = json.loads(conf.RESIDUALS_JSON.read_text())
    assert shipped["inputs_sha256"] == conf.inputs_digest(), "stale: run `python -m autotune.training.confidence`"
    for path, moe in ((conf.RUNS_CSV, False), (conf.MOE_RUNS_CSV, True)):
        report = validate_runs(read_runs(path), load_hardware)
        rows = [r for r in shipped["rows"] if bool(r.get("moe")) == moe]
        assert [r["id"] for r in rows] == [r.id for r in report.rows]
        for old, new in zip(rows, report.rows):
            assert old["features"] == list(conf.plan_features(new.plan)), old["id"]
            assert old["in_sample_error_pct"] == pytest.approx(new.error_pct, abs=0.05), old["id"]
            if moe:  # no fit sees the MoE runs: their error is held out as it stands
                assert old["error_pct"] == old["in_sample_error_pct"]


def test_an_expert_parallel_plan_is_judged_by_the_moe_runs():
    """The band of an EP>1 plan said "no run with EP>1 on h100" and showed the dense runs' -12..+22%, while the
    bundled MoE runs of that layout were off by up to +101%."""
    shipped = json.loads(conf.RESIDUALS_JSON.read_text())
    moe = conf.confidence({"tp": 1, "pp": 2, "vp": 12, "ep": 8, "zero": 1, "precision": "fp8"}, "h100-sxm5-80gb")
    assert "EP>1 on h100-sxm5-80gb" not in moe["unvalidated"]
    assert moe["n_runs"] >= 3
    worst = max(r["error_pct"] for r in shipped["rows"] if r.get("moe") and conf.silicon(r["gpu"]) == conf.silicon("h100-sxm5-80gb"))
    assert moe["error_band_pct"][1] > 22.0 and worst > 50.0
    # a dense plan's band is the dense runs' alone: the same as from a table without the MoE rows
    dense = conf.confidence({"tp": 8, "zero": 1}, "h100-sxm5-80gb")
    without = {**shipped, "rows": [r for r in shipped["rows"] if not r.get("moe")]}
    assert dense == conf.confidence({"tp": 8, "zero": 1}, "h100-sxm5-80gb", without) and not dense["moe"]
    assert "MoE runs no calibration is fitted to" in conf.sentence(moe)
    # and how often the MoE runs' bands held a run from a source left out (below the nominal 80%: said)
    held = shipped["coverage"]["moe_inside_pct"]
    assert moe["held_pct"] == held and f"held {held:.0f}% of runs from a source left out" in conf.sentence(moe)
    assert "-0%" not in conf.sentence({**moe, "error_band_pct": [-0.3, 101.0]})
    assert conf.confidence({"ep": 8}, "b200-sxm-180gb")["n_runs"] >= 3  # MoE runs on Blackwell give a band


def test_the_bands_cover_what_they_promise_on_held_out_sources():
    """A nominal 80% band (10th-90th percentile) holds 75-90% of rows from a source it never saw."""
    shipped = json.loads(conf.RESIDUALS_JSON.read_text())
    coverage = shipped["coverage"]
    assert coverage == conf.band_coverage(shipped)
    assert coverage["nominal_pct"] == 80.0
    assert 75.0 <= coverage["inside_pct"] <= 90.0
    assert coverage["rows_with_band"] >= 200


def test_coverage_counts_a_row_against_the_other_groups_only():
    table = {"rows": [{"id": f"{g}{i}", "source_group": g, "gpu": "gpu-a", "features": [], "error_pct": e}
                      for g, errors in (("a", [0.0, 1.0]), ("b", [2.0, 3.0]), ("c", [4.0, 5.0]), ("d", [40.0, 41.0]))
                      for i, e in enumerate(errors)]}
    cov = conf.band_coverage(table)
    # d's rows lie outside the band of a, b and c ([0, 5]); a's lie outside b, c and d's ([2, 41]) ...
    assert cov["rows_with_band"] == 8
    assert cov["by_source_group"] == {"a": 0.0, "b": 100.0, "c": 100.0, "d": 0.0}
    assert cov["inside_pct"] == 50.0


def test_a_band_needs_several_sources_and_weighs_each_source_the_same():
    one_source = {"rows": [{"id": f"x{i}", "source_group": "x", "gpu": "gpu-a", "features": [], "error_pct": float(i)}
                           for i in range(20)]}
    c = conf.confidence({}, "gpu-a", one_source)
    assert c["error_band_pct"] == [None, None] and "too few sources" in c["basis"]
    # 20 rows of one source at +10% and one row each of two others at -10% and 0%: by row, the band
    # would sit at +10; by source, each source counts once.
    rows = ([{"id": f"y{i}", "source_group": "y", "gpu": "gpu-a", "features": [], "error_pct": 10.0} for i in range(20)]
            + [{"id": "z", "source_group": "z", "gpu": "gpu-a", "features": [], "error_pct": -10.0},
               {"id": "w", "source_group": "w", "gpu": "gpu-a", "features": [], "error_pct": 0.0}])
    lo, hi = conf.confidence({}, "gpu-a", {"rows": rows})["error_band_pct"]
    assert lo < -5.0 and hi == 10.0


def test_plan_features_name_the_dimensions_in_use():
    plan = Plan(n_gpus=64, tp=8, pp=2, cp=2, zero=3, precision="fp8")
    assert conf.plan_features(plan) == ("TP>1", "PP>1", "CP>1", "ZeRO-3", "fp8")
    assert conf.plan_features({"tp": 1, "pp": 1}) == ()


def test_same_features_on_the_same_gpu_give_the_band():
    c = conf.confidence({"tp": 4}, "gpu-a", TABLE)
    assert c["n_runs"] == 4 and c["error_band_pct"] == [-10.0, 5.0]
    assert "same features" in c["basis"] and c["unvalidated"] == []


def test_a_feature_no_run_exercised_is_marked_unvalidated():
    c = conf.confidence({"tp": 4, "cp": 2}, "gpu-a", TABLE)
    assert c["unvalidated"] == ["CP>1 on gpu-a"]
    assert c["n_runs"] == 4  # falls back to the runs using the validated features (TP>1)


def test_a_gpu_without_validated_runs_gets_no_band_and_says_so():
    # Errors measured on other GPUs say nothing about this one: no borrowed band.
    c = conf.confidence({"zero": 3}, "gpu-z", TABLE)
    assert c["error_band_pct"] == [None, None] and c["n_runs"] == 0
    assert c["unvalidated"] == ["any plan on gpu-z"]
    assert conf.short_text(c) == "-" and "no validated runs on gpu-z" in conf.sentence(c)


def test_text_forms():
    c = conf.confidence({"tp": 4, "cp": 2}, "gpu-a", TABLE)
    assert conf.short_text(c).endswith("!")
    assert "CP>1 on gpu-a" in conf.sentence(c)
    assert conf.short_text(None) == "-"


def test_bundled_table_covers_the_validated_gpus():
    table = conf.load_table()
    gpus = {r["gpu"] for r in table["rows"]}
    assert {"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb"} <= gpus
    c = conf.confidence({"tp": 8, "pp": 4, "zero": 1}, "h100-sxm5-80gb")
    lo, hi = c["error_band_pct"]
    assert lo < hi and c["n_runs"] >= conf.MIN_RUNS


def test_predict_json_and_text_carry_the_confidence():
    from typer.testing import CliRunner

    from autotune.cli import app

    args = ["predict", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "8192", "-b", "64",
            "--plan", "tp=2,cp=2,zero=1,mbs=1,recompute=full"]
    result = CliRunner().invoke(app, args + ["--json"])
    assert result.exit_code == 0, result.output
    c = json.loads(result.stdout)["estimate"]["confidence"]
    assert set(c) == {"error_band_pct", "basis", "n_runs", "unvalidated", "moe", "held_pct"}
    text = CliRunner().invoke(app, args)
    assert "Expected error" in text.stdout


def test_an_moe_model_without_expert_parallelism_is_judged_by_the_moe_runs():
    """Qwen3-30B-A3B at EP1 had borrowed the dense runs' band (-15..+14% over 93 runs), though no dense run has
    a router or expert GEMMs and every MoE run used EP>1."""
    from typer.testing import CliRunner

    from autotune.cli import app

    args = ["predict", "-m", "qwen3-30b-a3b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64",
            "--plan", "tp=4,zero=1,recompute=full", "--json"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code in (0, 1), result.output
    c = json.loads(result.stdout)["estimate"]["confidence"]
    assert c["moe"] is True and c["unvalidated"][0] == "EP=1 for an MoE model on h100-sxm5-80gb"
    moe_runs = [r for r in conf.load_table()["rows"] if r.get("moe") and conf.silicon(r["gpu"]) == "gh100"]
    assert c["n_runs"] <= len(moe_runs)
    # a dense model's plan keeps the dense runs
    dense = conf.confidence({"tp": 4}, "h100-sxm5-80gb")
    assert dense["moe"] is False and dense["n_runs"] > len(moe_runs)
