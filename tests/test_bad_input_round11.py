"""What a hostile-input and round-trip sweep (round 11) found.

`emit` into a folder whose files it would overwrite printed its notes about the plan (searched for another engine or
framework, re-checked against another memory budget, missing the search's targets) and then refused: two or three
lines on stderr about files that were never written.  Now the refusal is one line, and the notes come only with files
that are written."""

from __future__ import annotations

import json
import math

import pytest

from tests.test_bad_input import (PROFILE, ROOT, SERVE, SMALL, assert_user_error, csv_rows, invoke, predicted,
                                   write_csv)


@pytest.fixture(scope="module")
def searched(tmp_path_factory):
    """A serving search (for vllm, with latency targets) and a training search (for megatron-lm), each in --out."""
    root = tmp_path_factory.mktemp("searched")
    serve, train = root / "serve", root / "train"
    for args, out in (([*SERVE, "--ttft-ms", "500", "--tpot-ms", "50"], serve), (SMALL, train)):
        result = invoke("search", *args, "--out", out)
        assert result.exit_code == 0, result.output
    return serve, train


@pytest.mark.parametrize("which, format, files", [
    ("serve", "sglang", "serve_sglang.sh"),
    ("train", "deepspeed", "ds_config.json, deepspeed_launch.sh"),
    ("train", "torchtitan", "autotune_torchtitan.py, torchtitan_launch.sh"),
])
def test_emit_refusing_to_overwrite_says_one_line_without_the_plans_notes(searched, tmp_path, which, format, files):
    plans = searched[0 if which == "serve" else 1] / "plans.json"
    out = tmp_path / "launch"
    first = invoke("emit", plans, "--format", format, "--out", out)
    assert first.exit_code == 0, first.output
    assert "note:" in first.stderr  # the notes come with the files written
    written = {p.name: p.read_text() for p in out.iterdir()}
    (out / files.split(", ")[0]).write_text("# my edits\n")
    again = invoke("emit", plans, "--format", format, "--out", out)
    assert_user_error(again, str(out), f"would overwrite {files}", "--force")
    assert (out / files.split(", ")[0]).read_text() == "# my edits\n"
    assert sorted(p.name for p in out.iterdir()) == sorted(written)


def test_emit_with_force_still_prints_its_notes(searched, tmp_path):
    plans = searched[0] / "plans.json"
    out = tmp_path / "launch"
    assert invoke("emit", plans, "--format", "sglang", "--out", out).exit_code == 0
    forced = invoke("emit", plans, "--format", "sglang", "--out", out, "--force")
    assert forced.exit_code == 0, forced.output
    assert "searched for vllm" in forced.stderr and "error" not in forced.stderr
    assert "Wrote" in forced.stdout


# --- a missed target written so that it reads as missed -----------------------------------------------------------

PLAN = "tp=1,max_batch=512,weights=fp8,kv=fp8"  # TPOT 41.07 ms, TTFT 258.35 ms


def _estimate(args=()):
    return predicted(invoke("predict", *SERVE, "--plan", PLAN, *args, "--json"))["estimate"]


@pytest.mark.parametrize("metric, decimals", [("TPOT", 0), ("TTFT", 1)])
def test_a_missed_latency_target_is_written_above_the_target(metric, decimals):
    """A TPOT of 41.07 ms over a 41 ms target read "TPOT 41 > 41 ms", a TTFT of 258.35 over 258.3 read
    "TTFT 258 > 258.3 ms": misses that looked like none."""
    value = _estimate()[f"{metric.lower()}_ms"]
    target = math.floor(value * 10**decimals) / 10**decimals  # just under the plan's latency, as a user writes it
    estimate = _estimate([f"--{metric.lower()}-ms", f"{target:g}"])
    assert not estimate["meets_targets"]
    shown, _, limit = estimate["misses"].removeprefix(f"{metric} ").partition(" > ")
    assert limit == f"{target:g} ms", estimate["misses"]
    assert float(shown.replace(",", "")) > target, estimate["misses"]
    assert len(shown.partition(".")[2]) >= decimals  # at least the target's decimals


def test_a_missed_target_far_above_is_still_whole_ms():
    estimate = _estimate(["--tpot-ms", "1", "--ttft-ms", "0.5"])
    assert estimate["misses"] == f"TTFT {estimate['ttft_ms']:,.1f} > 0.5 ms; TPOT {estimate['tpot_ms']:,.0f} > 1 ms"


# --- a search at --price 0 reads back ------------------------------------------------------------------------------

@pytest.mark.parametrize("workload, formats", [(SMALL, ("megatron", "slurm")), (SERVE, ("vllm", "sglang"))],
                         ids=["train", "serve"])
def test_a_search_at_price_zero_round_trips_through_explain_emit_and_report(tmp_path, workload, formats):
    """search --price 0 (GPUs already paid for) is taken, and wrote a plans.json whose embedded profile explain, emit
    and report refused: "inputs.hardware_profile: field 'price_usd_per_gpu_hour': must be > 0, but got 0.0"."""
    out = tmp_path / "run"
    searched = invoke("search", *workload, "--price", "0", "--out", out)
    assert searched.exit_code == 0, searched.output
    explained = invoke("explain", out, "--json")
    assert explained.exit_code == 0, explained.output
    if workload is SMALL:  # the price read back is the search's, not the profile's
        assert json.loads(explained.stdout)["estimate"]["cost_usd_per_million_tokens"] == 0
    for format in formats:
        emitted = invoke("emit", out, "--format", format, "--out", tmp_path / format)
        assert emitted.exit_code == 0, emitted.output
    reported = invoke("report", out, "--out", tmp_path / "report", "--trials", "0")
    assert reported.exit_code == 0, reported.output
    assert (tmp_path / "report" / "report.html").is_file()


def test_a_study_at_price_zero_is_joined_and_reported(tmp_path):
    """Its stored problem could not be read: worker and report --study said "start a new study"."""
    storage = f"sqlite:///{tmp_path}/s.db"
    searched = invoke("search", *SMALL, "--sampler", "tpe", "--trials", "20", "--storage", storage, "--study", "p",
                      "--price", "0")
    assert searched.exit_code in (0, 1), searched.output
    joined = invoke("worker", "--storage", storage, "--study", "p", "--trials", "22", "--wait", "0")
    assert joined.exit_code == 0, joined.output
    reported = invoke("report", "--storage", storage, "--study", "p", "--out", tmp_path / "report", "--trials", "0")
    assert reported.exit_code == 0, reported.output


def test_a_profile_yaml_still_states_a_price_above_zero(tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(PROFILE.replace("price_usd_per_gpu_hour: 2.99", "price_usd_per_gpu_hour: 0", 1))
    assert "price_usd_per_gpu_hour: 0\n" in path.read_text()
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", "price_usd_per_gpu_hour", "> 0")


# --- a silicon CSV's concurrency is a whole number of requests ----------------------------------------------------

SILICON = ROOT / "autotune" / "data" / "serving_silicon.csv"


def _silicon_with(tmp_path, column: str, value: str):
    rows = csv_rows(SILICON)[:5]
    rows[2][column] = value
    if column == "concurrency":
        rows[2]["concurrency_per_replica"] = ""
    return rows[2]["id"], write_csv(tmp_path / "silicon.csv", rows, list(rows[0]))


@pytest.mark.parametrize("column", ["concurrency", "concurrency_per_replica"])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_fractional_concurrency_in_a_silicon_csv_is_an_error_of_the_file(tmp_path, command, column):
    """concurrency 2.5 was read as 2.5 clients and predicted (and fitted to), where the serving-runs reader refuses
    a fractional concurrency_or_batch."""
    rid, path = _silicon_with(tmp_path, column, "2.5")
    args = [command, path] + (["--out", str(tmp_path / "c.yaml")] if command == "calibrate" else [])
    assert_user_error(invoke(*args), "silicon.csv", f"field '{column}'", f"row {rid!r}", "whole number", "'2.5'")
    assert not (tmp_path / "c.yaml").exists()


def test_a_whole_concurrency_written_as_a_float_is_still_read(tmp_path):
    rows = csv_rows(SILICON)[:5]
    rows[2]["concurrency"] = f"{float(rows[2]['concurrency']):.1f}"  # 32.0
    rows[2]["concurrency_per_replica"] = ""
    result = invoke("validate", write_csv(tmp_path / "silicon.csv", rows, list(rows[0])), "--json")
    assert result.exit_code == 0, result.output
