"""Validation against measured runs, and calibration of the profiles' efficiency parameters.

The fixture ``tests/data/training_runs_small.csv`` is 16 rows copied unchanged (source columns
included) from the shared ``training_runs.csv``: 13 usable rows from nine source groups
(Megatron-LM 2021-22 on A100, Megatron-LM and NeMo on H100, torchtitan on A100 and on the
power-limited H100, llm-foundry MPT on A100 40/80 GB and H100) and three rows the validation
must skip.  The tolerances pin today's accuracy loosely enough to survive small model changes
and tightly enough to catch a regression; they do not pin the whole file's MAPE.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
import yaml

from autotune.inputs.calibration import apply_calibration, calibration_from_mapping, load_calibration
from autotune.training.calibration import fit
from autotune.errors import InputError
from autotune.inputs.hardware import load_hardware
from autotune.training.runs import POWER_LIMITED, MeasuredRun, SkippedRow, infer_attention_kernel, publication_year, read_runs
from autotune.training.validation import prepare, validate_runs

FIXTURE = Path(__file__).parent / "data" / "training_runs_small.csv"
ROW_TOLERANCE_PCT = 15.0
FIXTURE_MAPE_BOUND_PCT = 8.0


@pytest.fixture(scope="module")
def runs():
    return read_runs(FIXTURE)


@pytest.fixture(scope="module")
def report(runs):
    return validate_runs(runs, load_hardware)


def _rows(path: Path) -> tuple[list[str], list[dict]]:
    with open(path, newline="") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames), list(reader)


def _write(path: Path, fields: list[str], rows: list[dict]) -> Path:
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields)
        writer.writeheader()
        writer.writerows(rows)
    return path


# --- validation ----------------------------------------------------------------------------------


# Rows the model is known to miss by more than the tolerance, with the bound they must stay within
# (docs/accuracy.md, third pass: torchtitan's long-sequence fp8 runs gain more from fp8 than the fitted
# fp8 GEMM efficiency gives).  A row here that improves should move back under the common tolerance.
KNOWN_DEVIATIONS_PCT = {"TT24-T2-1": 25.0}


def test_every_usable_fixture_row_is_predicted_within_tolerance(report):
    assert len(report.rows) == 13
    off = {r.id: round(r.error_pct, 1) for r in report.rows
           if abs(r.error_pct) > KNOWN_DEVIATIONS_PCT.get(r.id, ROW_TOLERANCE_PCT)}
    assert not off, f"rows off by more than {ROW_TOLERANCE_PCT}%: {off}"
    assert report.mape_pct < FIXTURE_MAPE_BOUND_PCT


def test_memory_is_compared_where_the_row_measured_it(report):
    with_memory = [r for r in report.rows if r.measured_memory_gib_per_gpu is not None]
    assert {r.id for r in with_memory} == {"TT24-T2-1", "TT24-T3-1"}
    assert all(abs(r.memory_error_pct) < 15.0 for r in with_memory)
    assert report.memory_mape_pct == pytest.approx(sum(abs(r.memory_error_pct) for r in with_memory) / 2)
    assert all(r.memory_error_pct is None for r in report.rows if r.measured_memory_gib_per_gpu is None)


def test_report_json_has_the_agreed_shape(report):
    data = json.loads(json.dumps(report.to_json()))
    assert {"rows", "skipped", "mape_pct", "memory_mape_pct", "by_source_group"} <= set(data)
    row_keys = {"id", "source_group", "measured_tokens_per_s_per_gpu", "predicted_tokens_per_s_per_gpu", "error_pct",
                "measured_memory_gib_per_gpu", "predicted_memory_gib_per_gpu"}
    assert all(row_keys <= set(row) for row in data["rows"])
    assert all(set(s) == {"id", "reason"} for s in data["skipped"])
    groups = data["by_source_group"]
    assert sum(g["n"] for g in groups.values()) == len(data["rows"])
    assert all(set(g) == {"n", "mape_pct"} for g in groups.values())
    mpt = [r["error_pct"] for r in data["rows"] if r["source_group"] == "llm-foundry_MPT_H100"]
    assert groups["llm-foundry_MPT_H100"]["mape_pct"] == pytest.approx(sum(abs(e) for e in mpt) / len(mpt))


def test_unknown_fields_are_evaluated_over_their_values_and_shown(report):
    row = report.row("NEMO2407-07")
    assert row.unknown_fields == ("sp", "zero", "recompute")
    assert row.n_candidates == 2 * 2 * 3
    low, high = row.predicted_range_tokens_per_s_per_gpu
    assert low <= row.predicted_tokens_per_s_per_gpu <= high and low < high
    assert row.fits  # the fastest candidate that fits
    known = report.row("MPT-H100-021")
    assert known.unknown_fields == () and known.n_candidates == 1
    assert known.predicted_range_tokens_per_s_per_gpu == (known.predicted_tokens_per_s_per_gpu,) * 2


def test_point_prediction_is_the_fastest_candidate_that_fits(runs):
    prepared = prepare(runs, load_hardware)
    from autotune.training.validation import evaluate

    ev = evaluate(prepared)
    for case, t, f, best in zip(prepared.cases, ev.tokens_per_s_per_gpu, ev.fits, ev.chosen):
        if f.any():
            assert f[best] and t[best] == t[f].max()


def test_skipped_rows_carry_their_reasons(report):
    reasons = {s.id: s.reason for s in report.skipped}
    assert set(reasons) == {"NAR21-T2-07", "KOR22-10", "NEMO-LS-B200-16K"}
    assert reasons["NAR21-T2-07"].startswith("marked unusable in the file: UNUSABLE: layout incomplete")
    assert "no global_batch" in reasons["KOR22-10"]


def test_rows_on_a_gpu_without_profile_or_that_cannot_be_expressed_are_skipped(tmp_path):
    fields, rows = _rows(FIXTURE)
    base = next(r for r in rows if r["id"] == "MPT-A100-40-017")
    other_gpu = {**base, "id": "X-GPU", "gpu": "v100-sxm2-32gb"}
    fp8_on_a100 = {**base, "id": "X-FP8", "precision": "fp8"}
    bad_layout = {**base, "id": "X-LAYOUT", "tp": "3"}
    path = _write(tmp_path / "runs.csv", fields, [base, other_gpu, fp8_on_a100, bad_layout])
    report = validate_runs(read_runs(path), load_hardware)
    reasons = {s.id: s.reason for s in report.skipped}
    assert [r.id for r in report.rows] == ["MPT-A100-40-017"]
    assert reasons["X-GPU"] == "no bundled hardware profile for gpu 'v100-sxm2-32gb'"
    assert "has no fp8 tensor cores" in reasons["X-FP8"]
    # tp=3 does not divide the row's GPU count: the reader says so before any plan is tried.
    assert reasons["X-LAYOUT"].startswith("layout does not multiply out: tp*pp*cp*dp")


# --- attention kernel, dropout and hardware variants -----------------------------------------------


def test_attention_kernel_is_inferred_from_the_publication_year_and_recorded(runs, report):
    by_id = {r.id: r for r in runs if isinstance(r, MeasuredRun)}
    assert by_id["NAR21-T1-01"].attention_kernel == "unfused"  # Narayanan et al. 2021
    assert by_id["KOR22-04"].attention_kernel == "unfused"  # 2022 (MLSys 2023 later in the text)
    assert by_id["MPT-H100-021"].attention_kernel == "flash"  # llm-foundry tables, 2024
    assert "publication year 2021" in by_id["NAR21-T1-01"].inferred["attention_kernel"]
    assert by_id["NAR21-T1-01"].model.dropout and not by_id["MPT-H100-021"].model.dropout
    assert report.row("KOR22-04").inferred["attention_kernel"].startswith("inferred from publication year 2022")
    assert publication_year("Smith et al. (arXiv:2104.04473) @f2e5db40, 2024-07-15") == 2024
    assert publication_year("no year here") is None


def test_an_attention_kernel_column_wins_and_is_checked():
    row = {"id": "r", "source": "Narayanan et al. 2021", "attention_kernel": "flash"}
    assert infer_attention_kernel(row) == ("flash", None)
    with pytest.raises(InputError, match="attention_kernel"):
        infer_attention_kernel({**row, "attention_kernel": "fused"})


def test_power_limited_rows_run_on_a_physical_variant(runs):
    run = next(r for r in runs if isinstance(r, MeasuredRun) and r.id == "TT24-T3-1")
    assert run.hardware_variant == POWER_LIMITED
    base = load_hardware("h100-sxm5-80gb")
    hw = run.hardware(base)
    assert hw.memory_gib == 96 and hw.memory_bandwidth_gb_per_s == 2400 and hw.tdp_w == 500
    assert 835.5 < hw.peak_tflops["bf16"] < base.peak_tflops["bf16"]
    assert hw.efficiency == base.efficiency and hw.intra_node == base.intra_node


# --- malformed input -------------------------------------------------------------------------------


def test_malformed_csv_raises_input_error(tmp_path):
    fields, rows = _rows(FIXTURE)
    missing = _write(tmp_path / "missing.csv", [f for f in fields if f != "tp"],
                     [{k: v for k, v in r.items() if k != "tp"} for r in rows])
    with pytest.raises(InputError, match="missing column.*tp") as info:
        read_runs(missing)
    assert str(missing) in str(info.value)
    bad_number = _write(tmp_path / "bad.csv", fields, [{**rows[0], "n_gpus": "thirty-two"}])
    with pytest.raises(InputError, match="n_gpus"):
        read_runs(bad_number)
    (tmp_path / "empty.csv").write_text("")
    with pytest.raises(InputError, match="empty file"):
        read_runs(tmp_path / "empty.csv")
    with pytest.raises(InputError, match="not found"):
        read_runs(tmp_path / "nowhere.csv")


# --- calibration -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def detuned_loader():
    """Bundled profiles pushed off their fitted values, so that a fit has something to recover."""

    def loader(name):
        hw = load_hardware(name)
        return hw.with_efficiency(gemm=min(0.95, hw.efficiency.gemm * 1.3), attention=min(0.95, hw.efficiency.attention * 1.5))

    return loader


@pytest.fixture(scope="module")
def fitted(runs, detuned_loader):
    return fit(runs, detuned_loader, params=("gemm", "attention"), logo=True, max_nfev=30)


def test_calibration_improves_the_fixture_mape(fitted):
    assert fitted.after.mape_pct <= fitted.before.mape_pct
    assert fitted.after.mape_pct < 0.6 * fitted.before.mape_pct
    assert set(fitted.fitted) == {"a100-sxm4-40gb", "a100-sxm4-80gb", "h100-sxm5-80gb"}
    # The A100s share their silicon's compute parameters.
    assert fitted.fitted["a100-sxm4-40gb"]["gemm"] == fitted.fitted["a100-sxm4-80gb"]["gemm"]
    for values in fitted.fitted.values():
        assert 0.05 <= values["gemm"] <= 1.0 and 0.05 <= values["attention"] <= 1.0


def test_leave_one_group_out_is_reported_per_group(fitted, report):
    assert set(fitted.logo) == set(report.by_source_group)
    assert sum(s.n for s in fitted.logo.values()) == len(report.rows)
    assert fitted.logo_mape_pct is not None and fitted.logo_mape_pct >= 0


def test_calibration_overlay_round_trips(fitted, runs, detuned_loader, tmp_path):
    path = tmp_path / "calib.yaml"
    fitted.write(path)
    raw = yaml.safe_load(path.read_text())
    assert set(raw["hardware"]) == set(fitted.fitted)
    assert all(set(block) == {"efficiency"} for block in raw["hardware"].values())
    overlay = load_calibration(path)
    assert overlay.source == str(path)
    hw = apply_calibration(detuned_loader("h100-sxm5-80gb"), overlay)
    assert hw.efficiency.gemm == pytest.approx(fitted.fitted["h100-sxm5-80gb"]["gemm"])
    assert hw.efficiency.memory == load_hardware("h100-sxm5-80gb").efficiency.memory  # untouched keys stay
    untouched = load_hardware("b200-sxm-180gb")
    assert apply_calibration(untouched, overlay) == untouched
    report = validate_runs(runs, detuned_loader, overlay)
    assert report.mape_pct == pytest.approx(fitted.after.mape_pct, rel=1e-9)
    assert report.calibration == str(path)


@pytest.mark.parametrize(("content", "field"), [
    ({"hardware": {"tpu-v9": {"efficiency": {"gemm": 0.7}}}}, "hardware.tpu-v9"),
    ({"hardware": {"h100-sxm5-80gb": {"efficiency": {"gemm_speed": 0.7}}}}, "hardware.h100-sxm5-80gb.efficiency.gemm_speed"),
    ({"hardware": {"h100-sxm5-80gb": {"efficiency": {"gemm": 1.7}}}}, "hardware.h100-sxm5-80gb.efficiency.gemm"),
    ({"hardware": {"h100-sxm5-80gb": {"efficiency": {"gemm": "fast"}}}}, "hardware.h100-sxm5-80gb.efficiency.gemm"),
    ({"hardware": {"h100-sxm5-80gb": {"gemm": 0.7}}}, "hardware.h100-sxm5-80gb"),
    ({"profiles": {}}, "profiles"),
])
def test_bad_overlay_raises_input_error_naming_file_and_field(tmp_path, content, field):
    path = tmp_path / "bad.yaml"
    path.write_text(yaml.safe_dump(content))
    with pytest.raises(InputError) as info:
        load_calibration(path)
    assert info.value.source == str(path)
    assert info.value.field == field
    assert str(path) in str(info.value)


def test_overlay_from_a_mapping_is_checked_too():
    with pytest.raises(InputError, match="unknown hardware profile"):
        calibration_from_mapping({"hardware": {"nope": {"efficiency": {}}}}, source="<test>")
    ok = calibration_from_mapping({"hardware": {"a100-sxm4-80gb": {"efficiency": {"gemm": 0.7}}}}, source="<test>")
    assert apply_calibration(load_hardware("a100-sxm4-80gb"), ok).efficiency.gemm == 0.7


def test_fit_rejects_unknown_parameters(runs):
    with pytest.raises(InputError, match="unknown efficiency parameter"):
        fit(runs, load_hardware, params=("gemm", "warp_speed"), logo=False)


def test_skipped_rows_pass_through_unchanged(runs):
    skipped = [r for r in runs if isinstance(r, SkippedRow)]
    assert [s.id for s in skipped] == ["NAR21-T2-07", "KOR22-10", "NEMO-LS-B200-16K"]


def test_zero3_collective_granularity_is_inferred_from_the_software_and_year():
    from autotune.training.runs import infer_zero3_collectives

    row = {"id": "x", "zero": "3", "notes": "ZeRO-3 (DeepSpeed) without model parallelism",
           "source": "Narayanan et al. 2021 (SC21)"}
    kind, how = infer_zero3_collectives(row)
    assert kind == "submodule" and "2021" in how
    assert infer_zero3_collectives({**row, "source": "DeepSpeed blog 2023"})[0] == "block"
    assert infer_zero3_collectives({**row, "notes": "FSDP full shard"})[0] == "block"
    assert infer_zero3_collectives({**row, "zero": "1"})[0] == "block"
    assert infer_zero3_collectives({**row, "zero3_collectives": "block"}) == ("block", None)
