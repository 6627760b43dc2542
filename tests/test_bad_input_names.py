"""Names in measured files and on the command line, as users spell them: engine cells (``NAME[@VERSION]``) read by one
parser in the silicon and serving-runs readers, and Hugging Face ids stored as the catalogue's id whatever spelling a
row uses.

Each case runs through typer's CliRunner (or the reader function): a cell that does not say which engine or release
a row ran is one line naming the file, the row, the column and the value, exit 2, no traceback.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error
from tests.test_bad_input_runs_csv_round5 import serving_csv, validate_json
from tests.test_bad_input_silicon_cells import ROWS, _mutated

runner = CliRunner()


# --- engine cells: one parser for NAME[@VERSION] ----------------------------------------------------------------

@pytest.mark.parametrize("value, what", [("vllm@", "its version is empty"), ("@1.0", "its name is empty"),
                                         ("trtllm@1.0@x", "more than one @"), ("@", "its name is empty")])
def test_a_silicon_engine_cell_without_its_name_or_version_is_refused(tmp_path, value, what):
    path = _mutated(tmp_path, {"engine": value})
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'engine'", "row 'bad' (line 4)", f"(engine={value!r})", what)


@pytest.mark.parametrize("value, what", [("vllm@", "its version is empty"), ("@0.6", "its name is empty")])
def test_a_serving_runs_engine_cell_without_its_name_or_version_is_refused(tmp_path, value, what):
    path = serving_csv(tmp_path / "runs.csv", {"engine": value, "engine_version": ""})
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'engine'", "row 'r1'", f"(engine={value!r})", what)


@pytest.mark.parametrize("value", ["TensorRT-LLM@1.0", "trtllm@1.0.0rc2", "TRT-LLM@1.0"])
def test_a_serving_runs_engine_cell_with_its_release_reads_as_the_engine(tmp_path, value):
    """``TensorRT-LLM@1.0`` was read whole and skipped as an unknown engine; it is TensorRT-LLM, release 1.0."""
    plain = validate_json(serving_csv(tmp_path / "plain.csv", {"engine": "trtllm", "engine_version": "1.0"}))
    report = validate_json(serving_csv(tmp_path / "runs.csv", {"engine": value, "engine_version": ""}))
    assert report["skipped"] == [] and len(report["rows"]) == 1
    assert report["rows"] == plain["rows"]


def test_a_serving_runs_engine_release_in_both_columns_must_agree(tmp_path):
    same = validate_json(serving_csv(tmp_path / "same.csv", {"engine": "trtllm@1.0", "engine_version": "1.0.0"}))
    assert same["skipped"] == [] and len(same["rows"]) == 1
    path = serving_csv(tmp_path / "runs.csv", {"engine": "trtllm@1.0", "engine_version": "0.14.0"})
    result = runner.invoke(app, ["validate", str(path)])
    assert_user_error(result, str(path), "field 'engine'", "row 'r1'", "engine='trtllm@1.0'",
                      "engine_version='0.14.0'")


def test_a_silicon_engine_cell_with_its_release_still_reads():
    from autotune.serving.silicon import SiliconRow, parse_silicon_row

    base = next(r for r in ROWS if r["engine"] == "sglang" and r["duplicate_primary"] == "true")
    plain = parse_silicon_row(base)
    assert isinstance(plain, SiliconRow)
    for value in ("SGLang@0.5.6", " sglang @ 0.5.6 "):
        assert parse_silicon_row({**base, "engine": value}) == plain, value
