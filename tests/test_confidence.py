"""Confidence per plan: the bundled residual table and the error band looked up from it."""

import json

import pytest

from autotune.training import confidence as conf
from autotune.training.plan import Plan

TABLE = {
    "rows": [
        {"id": f"A{i}", "source_group": "g", "gpu": "gpu-a", "features": ["TP>1"], "error_pct": e}
        for i, e in enumerate([-10.0, -5.0, 0.0, 5.0])
    ] + [
        {"id": "B0", "source_group": "g", "gpu": "gpu-a", "features": [], "error_pct": 20.0},
        {"id": "C0", "source_group": "h", "gpu": "gpu-b", "features": ["ZeRO-3"], "error_pct": -30.0},
    ],
}


def test_bundled_residual_table_is_up_to_date():
    """The shipped JSON must be what the bundled runs give with the current model and profiles.

    Regenerate with `python -m autotune.confidence` after changing either.
    """
    assert conf.RUNS_CSV.is_file() and conf.RESIDUALS_JSON.is_file()
    shipped = json.loads(conf.RESIDUALS_JSON.read_text())
    fresh = conf.build_table()
    assert [r["id"] for r in shipped["rows"]] == [r["id"] for r in fresh["rows"]]
    for old, new in zip(shipped["rows"], fresh["rows"]):
        assert old["features"] == new["features"], old["id"]
        assert old["error_pct"] == pytest.approx(new["error_pct"], abs=0.05), old["id"]


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
    assert set(c) == {"error_band_pct", "basis", "n_runs", "unvalidated"}
    text = CliRunner().invoke(app, args)
    assert "Expected error" in text.stdout
