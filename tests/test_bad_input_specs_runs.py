"""Measured-runs CSVs, model specs and hardware profiles a hostile-input sweep found accepted or unnamed: a
`usable` cell that is neither true nor false, a recompute or schedule the plans do not have, dense layers that
leave no expert layer, an average power above the TDP.

Each case runs as a person would type it, through typer's CliRunner: one line naming the file, the row or field
and the value, exit status 2, no traceback."""

from __future__ import annotations

import pytest

from tests.test_bad_input import TRAINING_CSV, assert_user_error, csv_rows, invoke, write_csv



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
