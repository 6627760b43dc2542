"""autotune explain: breakdowns, the binding constraint and the one-step sensitivity table."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.inputs.request import training_inputs
from autotune.outputs.explain import explain
from autotune.training.plan import parse_plan

runner = CliRunner()
INPUTS = ["-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "8192", "-b", "512"]


@pytest.fixture(scope="module")
def inputs():
    return training_inputs("llama3-70b", "h100-sxm5-80gb", 64, None, None, 8192, 512, None, None)


def test_sensitivity_covers_every_axis(inputs):
    plan = parse_plan("tp=4,pp=4,zero=1,mbs=2,recompute=selective,precision=bf16", 64)
    found = explain(inputs.model, inputs.cluster, inputs.workload, plan)
    axes = {row.axis for row in found.sensitivity}
    # every axis but ep, which only a mixture of experts has
    assert axes == {"tp", "pp", "cp", "mbs", "recompute", "zero", "precision"}
    changes = {row.change for row in found.sensitivity}
    assert "tp 4 -> 8 (dp 4 -> 2)" in changes and "recompute selective -> full" in changes
    full = next(r for r in found.sensitivity if r.change == "recompute selective -> full")
    assert full.step_time_change > 0 and full.memory_change_gib < 0  # recomputing costs time, saves memory


def test_binding_memory_when_plan_does_not_fit(inputs):
    plan = parse_plan("tp=1,pp=1,zero=0,mbs=4", 64)
    found = explain(inputs.model, inputs.cluster, inputs.workload, plan)
    assert found.binding_kind == "memory" and "GiB" in found.binding


def test_binding_rule_names_the_rule(inputs):
    # tp=8 fills the node: tp=16 would cross nodes (a space rule).
    plan = parse_plan("tp=8,pp=8,zero=1,mbs=1,recompute=full", 64)
    found = explain(inputs.model, inputs.cluster, inputs.workload, plan)
    tp16 = next(r for r in found.sensitivity if r.change.startswith("tp 8 -> 16"))
    assert tp16.reason and not tp16.fits


def test_explain_cli_from_plans_json(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096",
                                 "-b", "16", "--out", str(out)])
    assert result.exit_code == 0, result.output
    shown = runner.invoke(app, ["explain", str(out / "plans.json"), "--rank", "2"])
    assert shown.exit_code == 0, shown.output
    assert "What binds" in shown.stdout and "One step along each axis" in shown.stdout
    doc = json.loads(runner.invoke(app, ["explain", str(out / "plans.json"), "--json"]).stdout)
    plans = json.loads((out / "plans.json").read_text())["plans"]
    assert doc["plan"] == plans[0]["plan"]
    assert doc["estimate"]["step_time_s"] == pytest.approx(plans[0]["estimate"]["step_time_s"])
    assert doc["binding"]["kind"] in {"memory", "rule", "none", "optimum"}


def test_explain_cli_plan_and_errors():
    shown = runner.invoke(app, ["explain", *INPUTS, "--plan", "tp=8,pp=4,zero=1,mbs=1,recompute=full"])
    assert shown.exit_code == 0, shown.output
    neither = runner.invoke(app, ["explain"])
    assert neither.exit_code == 2 and "--plan" in neither.output
    bad_rank = runner.invoke(app, ["explain", "no-such-plans.json"])
    assert bad_rank.exit_code == 2 and "no such file" in bad_rank.output
    missing = runner.invoke(app, ["explain", "--plan", "tp=8", "-m", "llama3-70b"])
    assert missing.exit_code == 2 and "--hardware" in missing.output


def test_a_tp_step_on_a_dense_model_moves_etp_with_tp(inputs):
    # etp defaults to tp; a tp neighbour that kept the old etp broke a dense-model rule
    # ("etp differs from tp on a dense model") for every tp step, so no tp move was ever priced.
    plan = parse_plan("tp=4,pp=4,zero=1,mbs=1,recompute=selective", 64)
    found = explain(inputs.model, inputs.cluster, inputs.workload, plan)
    tp_rows = [r for r in found.sensitivity if r.axis == "tp"]
    assert {r.change.split(" (")[0] for r in tp_rows} == {"tp 4 -> 8", "tp 4 -> 2"}
    for row in tp_rows:
        assert "etp" not in row.reason, row
        assert row.plan["etp"] == row.plan["tp"]
    eight = next(r for r in tp_rows if r.change.startswith("tp 4 -> 8"))
    assert eight.reason == "" and eight.step_time_s is not None


def test_explain_and_report_count_as_fitting_only_what_the_search_ranked(tmp_path):
    """A search with --memory-headroom 0.15 ranks plans within 68 of 80 GiB: explain's verdicts and the report's
    figure count the same plans as fitting (they had counted every plan within 80 GiB)."""
    from typer.testing import CliRunner

    from autotune.cli import app
    from autotune.outputs.report.data import evaluate_cloud, load_plans_json, rebuild_problem

    runner = CliRunner()
    out = tmp_path / "s"
    args = ["search", "-m", "llama3-8b", "-H", "a100-sxm4-80gb", "--gpus", "8", "-s", "8192", "-b", "64",
            "--memory-headroom", "0.15", "--top", "50", "--out", str(out), "--json"]
    found = runner.invoke(app, args)
    assert found.exit_code == 0, found.output
    feasible = json.loads(found.stdout)["search"]["feasible"]
    cloud = evaluate_cloud(rebuild_problem(load_plans_json(out / "plans.json")["inputs"], str(out)))
    assert int(cloud.fits.sum()) == feasible
    for rank in range(1, 8):
        result = runner.invoke(app, ["explain", str(out), "--rank", str(rank), "--json"])
        assert result.exit_code == 0, result.output
        doc = json.loads(result.stdout)
        assert doc["memory_limit_gib"] == pytest.approx(80 * 0.85)
        assert doc["estimate"]["fits"] and doc["estimate"]["memory_gib_per_gpu"] <= 68.0
        for row in doc["sensitivity"]:
            if row["memory_gib"] is not None and not row["reason"]:
                assert row["fits"] == (row["memory_gib"] <= 68.0), row
