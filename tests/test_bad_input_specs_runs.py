"""Measured-runs CSVs, model specs and hardware profiles a hostile-input sweep found accepted or unnamed: a
`usable` cell that is neither true nor false, a recompute or schedule the plans do not have, dense layers that
leave no expert layer, an average power above the TDP.

Each case runs as a person would type it, through typer's CliRunner: one line naming the file, the row or field
and the value, exit status 2, no traceback."""

from __future__ import annotations

import pytest

from tests.test_bad_input import PROFILE, ROOT, TRAINING_CSV, assert_user_error, csv_rows, invoke, write_csv



# --- 4. the training runs CSV: usable and recompute cells ---------------------------------------------------------

@pytest.mark.parametrize("value", ["maybe", "flase", "2"])
def test_a_usable_cell_other_than_true_or_false_names_the_row(tmp_path, value):
    rows = csv_rows(TRAINING_CSV)
    rows[0]["usable"] = value
    path = write_csv(tmp_path / "runs.csv", rows)
    for args in (["validate", path], ["calibrate", path, "--out", tmp_path / "c.yaml"]):
        assert_user_error(invoke(*args), "runs.csv", "field 'usable'", f"row {rows[0]['id']!r}", "true or false",
                          value)
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("value, kept", [("false", False), ("no", False), ("0", False), ("true", True),
                                         ("yes", True), ("1", True), ("", True)])
def test_the_usual_spellings_of_usable_still_read(tmp_path, value, kept):
    rows = csv_rows(TRAINING_CSV)
    rows[0]["usable"] = value
    result = invoke("validate", write_csv(tmp_path / "runs.csv", rows))
    assert result.exit_code == 0, result.output
    assert (f"skipped {rows[0]['id']}: marked unusable" in result.stderr) is not kept


@pytest.mark.parametrize("column, value, choices", [("recompute", "partial", "none, selective, full"),
                                                    ("recompute", "Full", "none, selective, full"),
                                                    ("schedule", "zb-v", "1f1b, dualpipe")])
def test_an_unknown_setting_names_the_row_column_and_value(tmp_path, column, value, choices):
    rows = csv_rows(TRAINING_CSV)
    rows[0][column] = value
    header = list(rows[0])
    path = write_csv(tmp_path / "runs.csv", rows, header)
    assert_user_error(invoke("validate", path), "runs.csv", f"field '{column}'", f"row {rows[0]['id']!r}", choices,
                      repr(value))


# --- 5. a model spec whose leading dense layers leave no expert layer ---------------------------------------------

MIXTRAL_SPEC = (ROOT / "profiles" / "models" / "mixtral-8x7b.yaml").read_text()
PREDICT = ["-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", "-p", "tp=2"]


@pytest.mark.parametrize("first", [32, 40])
def test_first_dense_layers_must_leave_an_expert_layer(tmp_path, first):
    assert "first_dense_layers: 0" in MIXTRAL_SPEC and "n_layers: 32" in MIXTRAL_SPEC
    path = tmp_path / "spec.yaml"
    path.write_text(MIXTRAL_SPEC.replace("first_dense_layers: 0", f"first_dense_layers: {first}"))
    assert_user_error(invoke("predict", "-m", path, *PREDICT), "spec.yaml", "moe.first_dense_layers",
                      "< n_layers", f"first_dense_layers={first}, n_layers=32")


def test_first_dense_layers_below_n_layers_still_reads(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(MIXTRAL_SPEC.replace("first_dense_layers: 0", "first_dense_layers: 31"))
    result = invoke("predict", "-m", path, *PREDICT)
    assert result.exit_code == 0, result.output


# --- 6. a hardware profile whose average power exceeds its TDP ----------------------------------------------------

def test_average_power_above_the_tdp_is_refused(tmp_path):
    assert "tdp_w: 700\naverage_power_w: 532\n" in PROFILE
    path = tmp_path / "gpu.yaml"
    path.write_text(PROFILE.replace("average_power_w: 532\n", "average_power_w: 7000\n"))
    result = invoke("search", "-m", "llama3-8b", "-H", path, "--gpus", "8", "-s", "4096", "-b", "16")
    assert_user_error(result, "gpu.yaml", "field 'average_power_w'", "average_power_w <= tdp_w",
                      "average_power_w=7000, tdp_w=700")
    path.write_text(PROFILE.replace("average_power_w: 532\n", "average_power_w: 700\n"))  # at the TDP: fine
    ok = invoke("search", "-m", "llama3-8b", "-H", path, "--gpus", "8", "-s", "4096", "-b", "16")
    assert ok.exit_code == 0, ok.output
