"""Invalid cells, ragged rows and missing columns of a silicon-schema CSV are refused, not skipped.

`autotune validate` and `autotune calibrate` on a file in the schema of serving_silicon.csv: a non-empty cell that
cannot be what its column says (a width of 0, 2.5 or 1e12, a word, a length of 0, a negative load, a NaN, infinite,
overflowing, negative, zero or comma-grouped latency), a row with fewer cells than the header, or a header without
a column the rows are read from exits 2 with one line naming the file, the row, the column and the value, as the
training and serving-runs readers do.  Empty cells for what a record does not hold are still skips, with their
reasons as before.  Each small CSV is built from the first rows of the bundled file with one cell changed, and run
through typer's CliRunner.  (tests/test_bad_input_silicon_csv.py has the older cases of this schema.)
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error

runner = CliRunner()
SILICON = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_silicon.csv"


def _bundled() -> tuple[list[str], list[dict]]:
    with open(SILICON, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        return list(reader.fieldnames or []), rows


COLUMNS, ROWS = _bundled()
FIRST_DISAGG = next(r for r in ROWS if r["mode"] == "disagg")  # a disagg row with its worker counts (expressed)
assert FIRST_DISAGG["prefill_workers"] and FIRST_DISAGG["decode_workers"]


def _write(tmp_path: Path, rows: list[dict], columns: list[str] = COLUMNS, name: str = "silicon.csv") -> Path:
    path = tmp_path / name
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _mutated(tmp_path: Path, change: dict, base: dict | None = None) -> Path:
    """The first two rows of the bundled file (agg), then ``base`` (default: the third row) with ``change``: the
    changed row is on line 4 and has the id ``bad``."""
    return _write(tmp_path, [ROWS[0], ROWS[1], {**(base or ROWS[2]), "id": "bad", **change}])


def _refused(path: Path, column: str, value: str, command: str = "validate", *extra: str) -> str:
    out = path.parent / "calib.yaml"
    args = [command, str(path), *(["--out", str(out)] if command == "calibrate" else []), *extra]
    result = runner.invoke(app, args)
    assert_user_error(result, str(path), f"field '{column}'", "row 'bad' (line 4)", f"but got {value!r}")
    assert not out.exists()
    return result.stderr.strip()


# --- layout, length and load cells ------------------------------------------------------------------------

@pytest.mark.parametrize("column, value", [
    ("tp", "0"), ("tp", "-2"), ("tp", "2.5"), ("tp", "eight"), ("tp", "1e12"), ("pp", "0"), ("moe_ep", "1.5"),
    ("attention_dp", "-1"), ("input_len", "0"), ("output_len", "1e8"), ("concurrency", "-4"),
    ("concurrency_per_replica", "0"), ("n_gpus", "0"), ("replicas", "-1"), ("gpus_per_replica", "two"),
])
def test_a_bad_number_cell_is_refused(tmp_path, column, value):
    message = _refused(_mutated(tmp_path, {column: value}), column, value)
    assert "must be" in message


@pytest.mark.parametrize("column, value", [
    ("prefill_tp", "0"), ("decode_tp", "2.5"), ("prefill_workers", "0"), ("decode_workers", "-3"),
    ("decode_attention_dp", "1e12"), ("prefill_moe_ep", "many"), ("decode_batch", "0.5"),
])
def test_a_bad_disagg_layout_cell_is_refused(tmp_path, column, value):
    _refused(_mutated(tmp_path, {column: value}, base=FIRST_DISAGG), column, value)


# --- measurements -----------------------------------------------------------------------------------------

@pytest.mark.parametrize("column", ["ttft_ms", "tpot_ms"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "1e400", "-5", "0", "1,234.5", "1_234", "fast"])
def test_a_bad_measurement_is_refused(tmp_path, column, value):
    message = _refused(_mutated(tmp_path, {column: value}), column, value)
    assert "milliseconds" in message and "not recorded" not in message


def test_calibrate_refuses_a_bad_cell_before_fitting(tmp_path):
    _refused(_mutated(tmp_path, {"tp": "2.5"}), "tp", "2.5", "calibrate")


def test_json_output_refuses_too(tmp_path):
    _refused(_mutated(tmp_path, {"ttft_ms": "nan"}), "ttft_ms", "nan", "validate", "--json")


def test_the_message_reads_as_the_house_style(tmp_path):
    path = _mutated(tmp_path, {"tp": "2.5"})
    assert _refused(path, "tp", "2.5") == (f"error: {path}: field 'tp': row 'bad' (line 4): must be a positive "
                                           "integer up to 1,000,000 (empty: 1), but got '2.5'")


@pytest.mark.parametrize("change, column", [
    ({"gpu": "other: no-such-gpu", "tp": "2.5"}, "tp"),  # a GPU without a profile is a skip, its bad cell is not
    ({"quality_flags": "moe_layout_inconsistent", "ttft_ms": "nan"}, "ttft_ms"),
    ({"duplicate_primary": "false", "input_len": "0"}, "input_len"),
])
def test_a_row_that_would_be_skipped_is_still_checked(tmp_path, change, column):
    _refused(_mutated(tmp_path, change), column, change[column])


def test_a_disagg_row_without_workers_is_still_checked(tmp_path):
    base = {**FIRST_DISAGG, "prefill_workers": "", "decode_workers": ""}
    _refused(_mutated(tmp_path, {"decode_tp": "-8"}, base=base), "decode_tp", "-8")


# --- ragged rows ------------------------------------------------------------------------------------------

def test_a_short_row_reads_its_missing_cells_as_empty(tmp_path):
    """As the training and serving-runs readers do: a row cut after 20 cells has no ttft_ms and is skipped as not
    recorded (nothing guessed), the others are read."""
    path = _write(tmp_path, ROWS[:2])
    cells = next(csv.reader([path.read_text().splitlines()[1]]))
    path.write_text(path.read_text() + ",".join(["bad", *cells[1:20]]) + "\n")
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert {s["id"]: s["reason"] for s in doc["skipped"]}["bad"] == "TTFT not recorded (ttft_ms is empty)"


# --- missing columns --------------------------------------------------------------------------------------

@pytest.mark.parametrize("dropped", [("tp",), ("weight_precision",), ("ttft_ms", "tpot_ms")])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_missing_column_is_refused_naming_it(tmp_path, dropped, command):
    path = _write(tmp_path, ROWS[:3], [c for c in COLUMNS if c not in dropped])
    out = tmp_path / "calib.yaml"
    result = runner.invoke(app, [command, str(path), *(["--out", str(out)] if command == "calibrate" else [])])
    assert_user_error(result, str(path), f"missing silicon-schema column(s) {', '.join(dropped)}",
                      "with empty cells where a row does not say")
    assert not out.exists()


def test_columns_whose_empty_cell_has_a_meaning_may_be_left_out(tmp_path):
    """pp (1), attention DP (none), the MoE split, moe_precision (the weights' format) and concurrency_per_replica
    (one replica): a dense user's file need not carry them."""
    optional = ("pp", "attention_dp", "moe_tp", "moe_ep", "moe_precision", "concurrency_per_replica")
    path = _write(tmp_path, ROWS[:3], [c for c in COLUMNS if c not in optional])
    result = runner.invoke(app, ["validate", str(path), "--json"])
    assert result.exit_code == 0, result.output


def test_a_missing_disagg_column_is_refused_when_the_file_has_disagg_rows(tmp_path):
    columns = [c for c in COLUMNS if c != "decode_workers"]
    path = _write(tmp_path, [ROWS[0], FIRST_DISAGG], columns)
    assert_user_error(runner.invoke(app, ["validate", str(path)]), str(path),
                      "missing silicon-schema column(s) decode_workers", "disagg rows")


def test_layout_columns_of_a_mode_the_file_does_not_have_may_be_absent(tmp_path):
    """An agg-only file need not carry the disagg columns, nor a disagg-only file the agg ones."""
    disagg_only = [c for c in COLUMNS if not c.startswith(("prefill_", "decode_"))]
    agg = runner.invoke(app, ["validate", str(_write(tmp_path, ROWS[:3], disagg_only, "agg.csv")), "--json"])
    assert agg.exit_code == 0, agg.output
    assert len(json.loads(agg.stdout)["rows"]) == 3
    agg_only = [c for c in COLUMNS if c not in ("tp", "pp", "attention_dp", "moe_tp", "moe_ep")]
    disagg = runner.invoke(app, ["validate", str(_write(tmp_path, [FIRST_DISAGG], agg_only, "disagg.csv")), "--json"])
    assert disagg.exit_code == 0, disagg.output
    assert len(json.loads(disagg.stdout)["rows"]) == 1


# --- what stays a skip ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def bundled_json() -> dict:
    result = runner.invoke(app, ["validate", str(SILICON), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_the_bundled_file_still_validates(bundled_json):
    result = runner.invoke(app, ["validate", str(SILICON)])
    assert result.exit_code == 0, result.output
    assert "Traceback" not in result.output and result.stderr == ""
    assert "over 1694 rows; 550 skipped" in result.stdout
    assert len(bundled_json["rows"]) == 1694 and len(bundled_json["skipped"]) == 550
    assert not any(s["bad_input"] for s in bundled_json["skipped"])


def test_empty_cells_are_still_skipped_with_their_reasons(tmp_path, bundled_json):
    """One bundled row of each skip reason (worker counts, replica count, MoE split, concurrency not recorded, no
    room under the default memory budget) is skipped with the same reason in a small file; so are rows with an
    empty measurement, an empty load or an unknown GPU."""
    reasons = {s["id"]: s["reason"] for s in bundled_json["skipped"]}
    by_reason: dict[str, str] = {}
    for rid, reason in reasons.items():
        by_reason.setdefault(reason.split(" (")[0][:40], rid)
    assert len(by_reason) >= 5, by_reason
    picked = [r for r in ROWS if r["id"] in set(by_reason.values())]
    # a rounded copy is skipped only beside the row it copies, so that row comes along (and is expressed)
    twins = {reason.split("row ", 1)[1].split("'s measurement")[0] for rid, reason in reasons.items()
             if rid in set(by_reason.values()) and reason.startswith("a rounded copy of row ")}
    assert twins
    twin_rows = [r for r in ROWS if r["id"] in twins]
    extra = [{**ROWS[0], "id": "no-ttft", "ttft_ms": ""}, {**ROWS[0], "id": "no-load", "concurrency": "",
                                                           "concurrency_per_replica": ""},
             {**ROWS[0], "id": "no-gpu", "gpu": "other: no-such-gpu"}]
    result = runner.invoke(app, ["validate", str(_write(tmp_path, [ROWS[0], *twin_rows, *picked, *extra])), "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    got = {s["id"]: s["reason"] for s in doc["skipped"]}
    assert {r["id"] for r in doc["rows"]} == {ROWS[0]["id"], *twins}
    for r in picked:
        assert got[r["id"]] == reasons[r["id"]]
    assert got["no-ttft"] == "TTFT not recorded (ttft_ms is empty)"
    assert got["no-load"] == "concurrency not recorded (concurrency and concurrency_per_replica are empty)"
    assert got["no-gpu"] == "GPU 'other: no-such-gpu' has no bundled profile"
