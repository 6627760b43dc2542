"""Training runs CSVs a hostile-input sweep found accepted: a throughput no GPU can reach (a value summed over the
cluster, or per minute) and a precision cell that names no precision.  Both are errors of the file -- one line naming
the file, the row and the column, exit 2, no traceback -- in `validate` and in `calibrate`, not a row that is
predicted (and fitted to) or silently skipped."""

from __future__ import annotations

import pytest

from autotune.costmodel.flops import training_flops_per_token
from autotune.inputs.hardware import load_hardware
from autotune.training.runs import parse_row
from autotune.training.validation import PLAUSIBLE_PEAK_FACTOR, throughput_ceiling
from tests.test_bad_input import TRAINING_CSV, assert_user_error, csv_rows, invoke, write_csv


def _runs_with(tmp_path, column: str, value: str):
    rows = csv_rows(TRAINING_CSV)
    rows[0][column] = value
    return rows[0]["id"], write_csv(tmp_path / "runs.csv", rows, list(rows[0]))


def test_the_ceiling_is_five_times_the_peak_at_the_models_flops_per_token():
    rows = csv_rows(TRAINING_CSV)
    run = parse_row(next(r for r in rows if r["gpu"].startswith("a100")))
    hw = load_hardware(run.gpu)
    ceiling, why = throughput_ceiling(hw, run.model, run.workload.seq_len)
    # by hand: the A100's highest dense peak of any precision (int8: 624 TOP/s) x 5 / the model's FLOPs per token
    flops = training_flops_per_token(run.model, run.workload.seq_len, "none")
    assert ceiling == pytest.approx(PLAUSIBLE_PEAK_FACTOR * 624e12 / flops)
    assert "624 TFLOP/s" in why and run.model.name in why
    assert run.measured_tokens_per_s_per_gpu < ceiling / PLAUSIBLE_PEAK_FACTOR  # the real row: below the plain peak


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_throughput_summed_over_the_cluster_is_refused(tmp_path, command):
    rows = csv_rows(TRAINING_CSV)
    real = float(rows[0]["measured_tokens_per_s_per_gpu"])
    rid, path = _runs_with(tmp_path, "measured_tokens_per_s_per_gpu", f"{real * 3072:g}")  # summed over 3,072 GPUs
    args = [command, path] + (["--out", str(tmp_path / "c.yaml")] if command == "calibrate" else [])
    result = invoke(*args)
    assert_user_error(result, "runs.csv", f"row {rid!r}", "measured_tokens_per_s_per_gpu <=", "must hold",
                      "per GPU")
    assert not (tmp_path / "c.yaml").exists()


def test_a_throughput_at_the_ceiling_is_still_a_measurement(tmp_path):
    rows = csv_rows(TRAINING_CSV)
    run = parse_row(rows[0])
    ceiling, _ = throughput_ceiling(load_hardware(run.gpu), run.model, run.workload.seq_len)
    rows[0]["measured_tokens_per_s_per_gpu"] = f"{ceiling * 0.99:.6g}"
    result = invoke("validate", write_csv(tmp_path / "runs.csv", rows, list(rows[0])), "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["bf17", "BF16", "fp32", "int8"])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_precision_cell_that_names_no_training_precision_is_an_error_of_the_file(tmp_path, command, value):
    rid, path = _runs_with(tmp_path, "precision", value)
    args = [command, path] + (["--out", str(tmp_path / "c.yaml")] if command == "calibrate" else [])
    result = invoke(*args)
    assert_user_error(result, "runs.csv", "field 'precision'", f"row {rid!r}", "bf16, fp16, fp8", repr(value))
