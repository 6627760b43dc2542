"""Round 12 of the hostile-input sweep: what a user has and does is kept, and read back the way it was written."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
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
    runs.write_text("\n".join(lines[:12]) + "\n")  # 11 rows: enough for a fit and its held-out groups
    out = tmp_path / "train.json"
    result = runner.invoke(app, ["calibrate", str(runs), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "hardware" in json.loads(out.read_text())
    used = runner.invoke(app, ["predict", "-m", "llama3-8b", "-H", "a100-sxm4-80gb", "--gpus", "8", "--seq-len", "2048",
                               "--global-batch", "16", "-p", "tp=1", "--calibration", str(out), "--json"])
    assert used.exit_code in (0, 1), used.output  # 1: the plan does not fit; either way the overlay was read
    assert "malformed" not in used.output and "Traceback" not in used.output
    assert json.loads(used.stdout)["estimate"]["step_time_s"] > 0


def _one_silicon_row(tmp_path: Path, **cells) -> Path:
    from tests.test_bad_input import csv_rows, write_csv

    rows = csv_rows(DATA / "serving_silicon.csv")
    row = next(r for r in rows if r["id"].startswith("2026_04_06_llama_3_1_70b_h200_sxm_trtllm_fp8_agg_8192x1024"))
    return write_csv(tmp_path / "one.csv", [{**row, **cells}], list(rows[0]))


@pytest.mark.parametrize("cells, column", [
    ({"ttft_ms": "0.25"}, "ttft_ms"),   # 250 ms typed in seconds
    ({"tpot_ms": "0.012"}, "tpot_ms"),  # 12 ms typed in seconds
])
def test_a_silicon_latency_beyond_the_hardware_is_refused(tmp_path, cells, column):
    """An 8,192-token prompt of Llama-3.1-70B cannot be prefilled in 0.25 ms on 4 H200s (its floor at the fp8 peak is
    155 ms); it was accepted and scored as a 99.8% miss."""
    path = _one_silicon_row(tmp_path, **cells)
    for command in (["validate", str(path)], ["calibrate", str(path), "--out", str(tmp_path / "c.yaml")]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert column in result.output and "milliseconds" in result.output and "one.csv" in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "c.yaml").exists()


def test_the_bundled_silicon_rows_sit_well_above_their_latency_floors():
    from autotune.serving.plausibility import PLAUSIBLE_FLOOR_FACTOR
    from autotune.serving.silicon import SiliconRow, latency_floors_ms, read_silicon_rows

    rows = [r for r in read_silicon_rows(DATA / "serving_silicon.csv", primary_only=False) if isinstance(r, SiliconRow)]
    assert len(rows) > 1000
    ratios = [(r.measured_ttft_ms / f[0], r.measured_tpot_ms / f[1]) for r in rows for f in [latency_floors_ms(r)]]
    assert min(t for t, _ in ratios) > 1.5 and min(s for _, s in ratios) > 2.5  # above the floors: possible
    # and 5x above the refusal (at 1/PLAUSIBLE_FLOOR_FACTOR of the floor): a tighter factor would refuse real rows
    assert min(min(t, s) for t, s in ratios) * PLAUSIBLE_FLOOR_FACTOR > 5


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    from tests.test_bad_input import SERVE, SMALL, invoke

    root = tmp_path_factory.mktemp("searched12")
    serve, train = root / "serve", root / "train"
    for args, out in ((SERVE, serve), (SMALL, train)):
        result = invoke("search", *args, "--out", out)
        assert result.exit_code == 0, result.output
    return serve, train


@pytest.mark.parametrize("which, key, commands", [
    ("train", "zero", [["explain"], ["emit", "--framework", "megatron-lm"], ["report"]]),
    ("train", "precision", [["explain"]]),
    ("serve", "tp", [["explain"], ["emit", "--format", "vllm"], ["report"]]),
    ("serve", "kv", [["emit", "--format", "sglang"]]),
    ("serve", "dp", [["explain"]]),
])
def test_a_key_deleted_from_a_plans_json_plan_is_named_not_defaulted(searched, tmp_path, which, key, commands):
    """A plan key deleted by hand was read as its default (zero=0, tp=1, kv=bf16): explain and emit then spoke for a
    plan nobody searched."""
    from tests.test_bad_input import invoke

    folder = tmp_path / which
    folder.mkdir()
    doc = json.loads(((searched[0] if which == "serve" else searched[1]) / "plans.json").read_text())
    del doc["plans"][0]["plan"][key]
    (folder / "plans.json").write_text(json.dumps(doc))
    for command in commands:
        out = ["--out", str(tmp_path / "emitted")] if command[0] in ("emit", "report") else []
        result = invoke(command[0], folder, *command[1:], *out)
        assert result.exit_code == 2, result.output
        assert f"lacks ({key})" in result.output and f"plans.plan.{key}" in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "emitted").exists()


@pytest.mark.parametrize("which, keys", [
    ("train", ("etp", "schedule")),  # added after the first release: an older file's plans lack them
    ("serve", ("mode", "dp")),
])
def test_a_plans_json_of_an_earlier_release_still_reads_back(searched, tmp_path, which, keys):
    from tests.test_bad_input import invoke

    folder = tmp_path / which
    folder.mkdir()
    doc = json.loads(((searched[0] if which == "serve" else searched[1]) / "plans.json").read_text())
    for entry in doc["plans"]:
        for key in keys:
            entry["plan"].pop(key)
    (folder / "plans.json").write_text(json.dumps(doc))
    result = invoke("explain", folder)
    assert result.exit_code == 0, result.output
    fmt = ["--format", "vllm"] if which == "serve" else ["--framework", "megatron-lm"]
    result = invoke("emit", folder, *fmt, "--out", tmp_path / "emitted")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("typed, refused", [
    ("llama3-70b", True),                          # another bundled spec
    ("meta-llama/Llama-3.1-70B", True),            # a catalogue id of another spec
    ("meta-llama/Meta-Llama-3-8B", False),         # an id of the same spec: what a user may serve it as
    ("/models/my-llama-8b", False),                # a local checkpoint: no spec to compare with
])
def test_an_edited_model_name_in_a_serving_plans_json_is_checked_against_its_spec(searched, tmp_path, typed, refused):
    """A serving plans.json records the --model the user typed (emit serves it by that name) beside the spec it embeds.
    An edit to another bundled model was ignored: explain spoke for the embedded spec and emit served the new name
    with the old plan's layout and memory."""
    from tests.test_bad_input import invoke

    folder = tmp_path / "serve"
    folder.mkdir()
    doc = json.loads((searched[0] / "plans.json").read_text())
    assert doc["inputs"]["model_spec"]["name"] == "llama3-8b"
    doc["inputs"]["model"] = typed
    (folder / "plans.json").write_text(json.dumps(doc))
    for command in (["explain"], ["emit", "--format", "vllm", "--out", str(tmp_path / "emitted")]):
        result = invoke(command[0], folder, *command[1:])
        assert "Traceback" not in result.output
        if refused:
            assert result.exit_code == 2, result.output
            assert "inputs.model" in result.output and "rerun the search" in result.output
        else:
            assert result.exit_code == 0, result.output


@pytest.mark.parametrize("cells, column", [
    ({"ttft_ms_mean": "0.05"}, "ttft_ms_mean"),
    ({"itl_ms_mean": "0.0015"}, "itl_ms_mean"),
    ({"output_tokens_per_s_per_gpu": "9e7"}, "output_tokens_per_s_per_gpu"),
    ({"itl_ms_mean": "", "tpot_ms_mean": "0.0015"}, "tpot_ms_mean"),  # the column the value was read from
    ({"ttft_ms_mean": "", "ttft_ms_median": "0.05"}, "ttft_ms_median"),
])
def test_a_serving_run_beyond_the_hardware_is_refused(tmp_path, cells, column):
    """The serving-runs schema, by the silicon rows' rule: a TTFT, ITL or throughput the GPU cannot reach was scored."""
    from tests.test_bad_input import csv_rows, write_csv

    rows = csv_rows(DATA / "serving_runs.csv")
    row = next(r for r in rows if r["ttft_ms_mean"] and r["itl_ms_mean"] and r["output_tokens_per_s_per_gpu"])
    path = write_csv(tmp_path / "runs.csv", [{**row, **cells}], list(rows[0]))
    for command in (["validate", str(path)], ["calibrate", str(path), "--out", str(tmp_path / "c.yaml")]):
        result = CliRunner().invoke(app, command)
        assert result.exit_code == 2, result.output
        assert f"field '{column}'" in result.output and f"({column}=" in result.output
        assert row["id"] in result.output and "runs.csv" in result.output
        assert "Traceback" not in result.output
    assert not (tmp_path / "c.yaml").exists()


def test_the_bundled_serving_runs_are_read():
    from autotune.serving.runs import ServingRun
    from autotune.serving.validation import read_runs_csv

    parsed, _, _ = read_runs_csv(DATA / "serving_runs.csv")  # no row is refused by the plausibility bounds
    assert sum(isinstance(r, ServingRun) for r in parsed) > 600
