"""Hostile input to `autotune validate` and `autotune calibrate` on the silicon schema (serving_silicon.csv).

A nonsense cell refuses the file (exit 2) naming the row, the column and the value (never a silent 1, a
truncation, a "not recorded" or a skip); an empty cell is still a skip with its reason; `--json` is strict JSON;
a header that means the silicon schema gets the silicon schema's missing columns; an empty or ragged file
is said as such; a fit on fewer rows than parameters says so.  Each case goes through typer's CliRunner.
(More cases: tests/test_bad_input_silicon_cells.py.)
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.serving import validation
from autotune.serving.validation import fitted_parameter_count

runner = CliRunner()
SILICON = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_silicon.csv"


def _base_rows() -> tuple[list[str], dict, dict]:
    """The header, a vLLM agg row and a TensorRT-LLM disagg row (both unique measurements the model expresses)."""
    with open(SILICON, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        columns = list(reader.fieldnames or [])
    agg = next(r for r in rows if r["engine"] == "vllm" and r["mode"] == "agg" and r["duplicate_primary"] == "true")
    disagg = next(r for r in rows if r["id"] == "dsr1_gb200_trtllm_fp8_disagg_1024x8192_c2048_cfg375")
    return columns, agg, disagg


COLUMNS, AGG, DISAGG = _base_rows()


def _write(tmp_path: Path, changes: list[dict], base: dict = AGG, columns: list[str] = COLUMNS) -> Path:
    """Row 'good' (the base row unchanged), then one row per change, with ids row0, row1, ...  Each row measures
    its own TTFT (the base's plus i + 1 ms, unless the change sets it): the same measurement twice would be a
    copy, which validate skips."""
    path = tmp_path / "silicon.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerow({**base, "id": "good"})
        for i, change in enumerate(changes):
            own = {"ttft_ms": repr(float(base["ttft_ms"]) + i + 1)} if base.get("ttft_ms") else {}
            writer.writerow({**base, "id": f"row{i}", **own, **change})
    return path


def _validate_json(path: Path) -> tuple[dict, dict[str, str]]:
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout, parse_constant=_reject)
    return doc, {s["id"]: s["reason"] for s in doc["skipped"]}


def _refused(path: Path, column: str, value: str, json_flag: bool = False) -> str:
    """Exit 2, no traceback, nothing on stdout, one error line naming the file, the row, the column and the value."""
    result = runner.invoke(app, ["validate", str(path), *(["--json"] if json_flag else [])])
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and result.stdout == ""
    message = result.stderr.strip()
    assert message.startswith(f"error: {path}: field '{column}': row 'row0' (line 3): must be"), message
    assert message.endswith(f"but got {value.strip()!r}"), message
    return message


def _reject(name: str):
    raise AssertionError(f"non-standard JSON constant {name} in --json output")


def _expressed(doc: dict) -> set[str]:
    return {r["id"] for r in doc["rows"]}


# --- 1. parallelism widths are not coerced to 1 or truncated ----------------------------------------------

@pytest.mark.parametrize("column, value", [
    ("tp", "0"), ("tp", "-4"), ("tp", "eight"), ("tp", "2.7"), ("pp", "0"), ("attention_dp", "-4"),
    ("attention_dp", "1.5"), ("moe_tp", "eight"), ("moe_ep", "-8"), ("tp", "1e400"), ("tp", "99999999999"),
])
def test_a_bad_agg_layout_cell_is_refused_naming_column_and_value(tmp_path, column, value):
    message = _refused(_write(tmp_path, [{column: value}]), column, value)
    assert "must be a positive integer" in message


def test_the_error_reads_as_the_house_style(tmp_path):
    path = _write(tmp_path, [{"tp": "0"}])
    message = _refused(path, "tp", "0", json_flag=True)
    assert message == (f"error: {path}: field 'tp': row 'row0' (line 3): must be a positive integer up to 1,000,000 "
                       "(empty: 1), but got '0'")


def test_empty_and_zero_cells_keep_their_meaning(tmp_path):
    """Empty tp/pp read as 1; attention_dp, moe_tp, moe_ep of 0 are AIC's "not set" (835 rows of the data)."""
    doc, reasons = _validate_json(_write(tmp_path, [{"attention_dp": "0", "moe_tp": "0", "moe_ep": "0"},
                                                    {"pp": ""}, {"attention_dp": "", "moe_ep": ""}]))
    assert _expressed(doc) == {"good", "row0", "row1", "row2"}, reasons


@pytest.mark.parametrize("column, value", [
    ("decode_tp", "0"), ("prefill_tp", "-4"), ("decode_attention_dp", "eight"), ("prefill_moe_ep", "2.7"),
    ("prefill_workers", "0"), ("decode_workers", "-1"), ("decode_workers", "two"), ("prefill_pp", "0"),
])
def test_a_bad_disagg_layout_cell_is_refused(tmp_path, column, value):
    message = _refused(_write(tmp_path, [{column: value}], base=DISAGG), column, value)
    assert "must be a positive integer" in message


def test_a_bad_cell_refuses_the_file_but_a_copy_is_a_skip(tmp_path):
    result = runner.invoke(app, ["validate", str(_write(tmp_path, [{"tp": "0"}, {"duplicate_primary": "false"}]))])
    assert result.exit_code == 2, result.output
    assert "field 'tp': row 'row0'" in result.stderr and "row1" not in result.stderr
    result = runner.invoke(app, ["validate", str(_write(tmp_path, [{"duplicate_primary": "false"}]))])
    assert result.exit_code == 0, result.output
    assert "row0" not in result.stderr  # a copy is not a fault of the file
    assert "over 1 rows; 1 skipped" in result.stdout


# --- 2. absurd magnitudes ---------------------------------------------------------------------------------

@pytest.mark.parametrize("change, column, bound", [
    ({"input_len": "99999999999"}, "input_len", "from 1 to 10,000,000"),
    ({"output_len": "2.5"}, "output_len", "whole number of tokens"),
    ({"concurrency": "1e15", "concurrency_per_replica": ""}, "concurrency", "from 1 to 10,000,000"),
    ({"concurrency_per_replica": "1e15"}, "concurrency_per_replica", "from 1 to 10,000,000"),
    ({"concurrency_per_replica": "0.5"}, "concurrency_per_replica", "from 1 to 10,000,000"),
    ({"ttft_ms": "1e-300"}, "ttft_ms", "above 0.001 and below 1e+08"),
    ({"ttft_ms": "1e308"}, "ttft_ms", "above 0.001 and below 1e+08"),
    ({"tpot_ms": "1e8"}, "tpot_ms", "above 0.001 and below 1e+08"),
])
def test_absurd_magnitudes_are_refused_with_the_bound(tmp_path, change, column, bound):
    message = _refused(_write(tmp_path, [change]), column, change[column], json_flag=True)
    assert bound in message, message


# --- 3. "not recorded" only for empty cells ---------------------------------------------------------------

@pytest.mark.parametrize("column, value", [
    ("ttft_ms", "fast"), ("ttft_ms", "nan"), ("ttft_ms", "inf"), ("ttft_ms", "-5"), ("ttft_ms", "0"),
    ("tpot_ms", "-inf"), ("input_len", "0"), ("input_len", "-1024"), ("output_len", "many"),
    ("concurrency", "-3"),
])
def test_a_value_is_not_called_not_recorded(tmp_path, column, value):
    message = _refused(_write(tmp_path, [{column: value}]), column, value, json_flag=True)
    assert "not recorded" not in message


@pytest.mark.parametrize("change, reason", [
    ({"ttft_ms": ""}, "TTFT not recorded (ttft_ms is empty)"),
    ({"tpot_ms": " "}, "TPOT not recorded (tpot_ms is empty)"),
    ({"input_len": ""}, "input/output lengths not recorded (input_len is empty)"),
    ({"concurrency": "", "concurrency_per_replica": ""}, "concurrency not recorded"),
])
def test_empty_cells_are_not_recorded(tmp_path, change, reason):
    _, reasons = _validate_json(_write(tmp_path, [change]))
    assert reasons["row0"].startswith(reason), reasons["row0"]


# --- 4. strict JSON ---------------------------------------------------------------------------------------

def test_json_has_no_nan_or_infinity(tmp_path, monkeypatch):
    """A prediction so large that its error overflows, and a NaN one: null, not Infinity/NaN."""
    def huge(rows, params, built=None):
        return np.full(len(rows), 1e308), np.full(len(rows), np.nan)

    monkeypatch.setattr(validation, "predict_silicon", huge)
    result = runner.invoke(app, ["validate", str(_write(tmp_path, [{}])), "--json"])
    assert result.exit_code == 0, result.output
    assert "Infinity" not in result.stdout and "NaN" not in result.stdout
    doc = json.loads(result.stdout, parse_constant=_reject)
    row = doc["rows"][0]
    assert row["predicted_ttft_ms"] == 1e308 and row["ttft_error_pct"] is None
    assert row["predicted_tpot_ms"] is None and row["tpot_error_pct"] is None


# --- 5. a silicon header missing a column is still the silicon schema -------------------------------------

@pytest.mark.parametrize("dropped", ["ttft_ms", "hf_model_id", "engine", "gpu", "input_len"])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_missing_silicon_column_is_named(tmp_path, dropped, command):
    path = _write(tmp_path, [], columns=[c for c in COLUMNS if c != dropped])
    args = [command, str(path)] + (["--out", str(tmp_path / "x.yaml")] if command == "calibrate" else [])
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert f"missing silicon-schema column(s) {dropped}" in result.stderr and str(path) in result.stderr
    assert "n_layers" not in result.stderr and "Traceback" not in result.output
    assert not (tmp_path / "x.yaml").exists()


# --- 6. no data rows; ragged rows ------------------------------------------------------------------------

@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_a_header_only_file_says_it_has_no_data_rows(tmp_path, json_flag):
    path = tmp_path / "header.csv"
    path.write_text(",".join(COLUMNS) + "\n\n")
    result = runner.invoke(app, ["validate", str(path), *json_flag])
    assert result.exit_code == 2, result.output
    assert "no data rows" in result.stderr and str(path) in result.stderr
    assert result.stdout == ""


def test_a_short_row_reads_its_missing_trailing_cells_as_empty(tmp_path):
    """As the training and serving-runs readers read them: a row cut after its 12th cell has no ttft_ms, which
    skips it as not recorded (nothing is guessed); extra empty cells are harmless."""
    path = _write(tmp_path, [])
    good = path.read_text().splitlines()[1]
    cells = next(csv.reader([good]))
    short = ",".join(["short", *cells[1:12]])
    text = path.read_text()
    trailing = dict(zip(COLUMNS, cells), id="trailing", ttft_ms=repr(float(cells[COLUMNS.index("ttft_ms")]) + 1))
    line = io.StringIO()
    csv.writer(line, lineterminator="").writerow([trailing[c] for c in COLUMNS])
    path.write_text(text + line.getvalue() + ",,\n")
    doc, _ = _validate_json(path)
    assert _expressed(doc) == {"good", "trailing"}  # empty trailing cells are harmless
    path.write_text(text + short + "\n")
    doc, _ = _validate_json(path)
    assert _expressed(doc) == {"good"}
    assert {s["id"]: s["reason"] for s in doc["skipped"]}["short"] == "TTFT not recorded (ttft_ms is empty)"


def test_a_long_row_is_an_error_of_the_file(tmp_path):
    """More cells than the header: a comma inside an unquoted cell shifts every column after it, so the file is
    refused as a whole (the CSV reader's check, before any row is read)."""
    path = _write(tmp_path, [])
    good = path.read_text().splitlines()[1]
    path.write_text(path.read_text() + good.replace("good", "long", 1) + ",surplus\n")
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 2, result.output
    assert f"row 3 has {len(COLUMNS) + 1} cells but the header names {len(COLUMNS)} columns" in result.stderr


# --- 7. a fit on fewer rows than parameters -------------------------------------------------------------

def test_calibrate_on_few_rows_notes_the_unidentified_parameters(tmp_path):
    path = _write(tmp_path, [{"concurrency": "16", "concurrency_per_replica": "16"}, {"ttft_ms": ""}])
    out = tmp_path / "few.yaml"
    result = runner.invoke(app, ["calibrate", str(path), "--out", str(out), "--json"])
    assert result.exit_code == 0, result.output
    n = fitted_parameter_count(["vllm"], silicon=True)
    assert n > 2
    assert f"note: {path}: 2 expressed row(s) for {n} fitted parameters" in result.stderr
    assert "stay near the shipped fit" in result.stderr
    assert out.exists()
    doc = json.loads(result.stdout, parse_constant=_reject)
    assert doc["rows"] == 2 and set(doc["engines"]) == {"vllm"}
