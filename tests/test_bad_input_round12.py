"""Round 12 of the hostile-input sweep: what a user has and does is kept, and read back the way it was written."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input_serving_cli import _csv_rows

DATA = Path(__file__).resolve().parent.parent / "autotune" / "data"


def _runs_slice(tmp_path: Path) -> Path:
    return _csv_rows(DATA / "serving_runs.csv", lambda r: r["id"].startswith("TRT014-00"), tmp_path / "runs.csv")


def test_calibrate_out_json_writes_json_that_calibration_reads(tmp_path):
    """`calibrate --out x.json` wrote YAML, which `--calibration x.json` refused as malformed JSON."""
    runner = CliRunner()
    out = tmp_path / "serving.json"
    result = runner.invoke(app, ["calibrate", str(_runs_slice(tmp_path)), "--out", str(out)])
    assert result.exit_code == 0, result.output
    doc = json.loads(out.read_text())  # JSON, not YAML
    assert doc["schema"] == "serving" and doc["engines"]
    common = ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
              "-p", "tp=8", "--input-len", "1024", "--output-len", "128", "--json"]
    used = runner.invoke(app, [*common, "--engine", "trtllm@0.14", "--calibration", str(out)])
    assert used.exit_code == 0, used.output
    assert "Traceback" not in used.output


def test_training_calibrate_out_json_writes_json_that_calibration_reads(tmp_path):
    runner = CliRunner()
    runs = tmp_path / "runs.csv"
    lines = (DATA / "training_runs.csv").read_text().splitlines()
    runs.write_text("\n".join(lines[:40]) + "\n")
    out = tmp_path / "train.json"
    result = runner.invoke(app, ["calibrate", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "hardware" in json.loads(out.read_text())
    used = runner.invoke(app, ["predict", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "64", "--seq-len", "8192",
                               "--global-batch", "512", "-p", "tp=8,pp=1", "--calibration", str(out), "--json"])
    assert used.exit_code in (0, 1), used.output  # 1: the plan does not fit; either way the overlay was read
    assert "malformed" not in used.output and "Traceback" not in used.output
    assert json.loads(used.stdout)["estimate"]["step_time_s"] > 0
