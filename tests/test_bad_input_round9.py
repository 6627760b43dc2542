"""Hostile inputs, round 9: serving predict/search flags, hand-edited plans.json given to explain, report and emit,
serving launch files, calibration overlays given to validate, tune and worker study flags, and hand-written
hardware profiles with odd values.

Most of the ~600 invocations of the sweep were refused well already; these are the ones that were not, each
failing on the code before its fix: a comma-separated -H given to a one-profile command was called an unknown
profile while it listed bundled ones; a --model-path, --data-path or --tokenizer starting with '-' (or holding a
line break) went into the launch script as an engine option; a profile's memory bandwidth in TB/s or peak in
PFLOP/s (as datasheets print them) planned a GPU a thousand times too slow; a training overlay that calibrates
none of the rows' GPUs changed nothing in `validate`, silently; --prior-top and --margin with --no-prior, and
--heartbeat with a journal: storage, were dropped without a word; a serving space of disagg plans only, searched
for an aggregated-only release (trtllm@0.14), ranked agg plans it does not list.

Each case runs as a person would type it, through typer's CliRunner: a user error is one line naming the file,
the field and a fix, exit status 2, no traceback."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.test_bad_input import PROFILE, ROOT, SERVE, SMALL, assert_user_error, invoke

SERVE_ANY_HW = [a if a != "h100-sxm5-80gb" else "{hw}" for a in SERVE]
RUNS = ROOT / "examples" / "data" / "my_runs.csv"  # h100-sxm5-80gb rows


# --- 1. several hardware profiles where a command takes one ---------------------------------------------------

@pytest.mark.parametrize("args", [
    ["predict", *[a.format(hw="h100-sxm5-80gb,a100-sxm4-80gb") for a in SERVE_ANY_HW], "--plan", "tp=1"],
    ["search", *[a.format(hw="h100-sxm5-80gb,a100-sxm4-80gb") for a in SERVE_ANY_HW]],
    ["predict", *[a if a != "h100-sxm5-80gb" else "h100-sxm5-80gb,a100-sxm4-80gb" for a in SMALL], "--plan", "tp=1"],
    ["hardware", "show", "h100-sxm5-80gb,a100-sxm4-80gb"],
], ids=["serve-predict", "serve-search", "train-predict", "show"])
def test_a_list_of_profiles_where_one_is_taken_is_named_as_such(args, tmp_path, monkeypatch):
    """It read 'unknown hardware 'h100-sxm5-80gb,a100-sxm4-80gb'; bundled: ..., a100-sxm4-80gb, ..., h100-sxm5-80gb'."""
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), "takes one hardware profile", "capacity planning")


def test_a_list_of_profiles_still_plans_capacity_and_one_profile_still_serves():
    capacity = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb,a100-sxm4-80gb", "--gpus", "8..16", "-s",
                      "4096", "-b", "16", "--tokens", "1e11")
    assert capacity.exit_code == 0, capacity.output
    one = invoke("predict", *[a.format(hw="h100-sxm5-80gb") for a in SERVE_ANY_HW], "--plan", "tp=1")
    assert one.exit_code == 0, one.output


# --- 2. paths a launch script passes on as arguments ----------------------------------------------------------

@pytest.fixture(scope="module")
def serve_plans(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serve") / "plans"
    result = invoke("search", *SERVE, "--top", "1", "--out", out)
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("flag, value, needle", [
    ("--model-path", "--trust-remote-code", "would pass on as an option"),
    ("--model-path", " -x", "would pass on as an option"),
    ("--model-path", "meta-llama\nrm -rf x", "control character"),
    ("--model-path", "a\tb", "control character"),
], ids=["option", "spaced-option", "line-break", "tab"])
def test_a_serving_model_path_that_is_not_one_argument_is_refused(flag, value, needle, serve_plans, tmp_path):
    """The script read MODEL='--trust-remote-code' and ran `vllm serve "$MODEL"`: an engine option, not weights."""
    out = tmp_path / "launch"
    assert_user_error(invoke("emit", serve_plans, "-f", "vllm", flag, value, "--out", out), flag, needle)
    assert not out.exists()


@pytest.mark.parametrize("flag", ["--data-path", "--tokenizer"])
def test_a_training_data_path_or_tokenizer_starting_with_a_dash_is_refused(flag):
    args = ["emit", "-f", "megatron", "--plan", "tp=1", *SMALL, flag]
    assert_user_error(invoke(*args, "-x"), flag, "would pass on as an option", "./-x")
    assert_user_error(invoke(*args, "data\nmore"), flag, "control character")


def test_a_model_path_of_a_folder_named_with_a_dash_is_written_as_given(serve_plans):
    result = invoke("emit", serve_plans, "-f", "vllm", "--model-path", "./--x")
    assert result.exit_code == 0, result.output
    assert "MODEL=./--x" in result.stdout


# --- 3. hardware profiles: numbers in the datasheet's larger unit ----------------------------------------------

from tests.test_bad_input_hf_config import profile  # noqa: E402  (the bundled H100 profile with one field set)


@pytest.mark.parametrize("field, value, unit", [
    ("memory_bandwidth_gb_per_s", 3.35, "TB/s"),  # H100: 3.35 TB/s
    ("peak_tflops.bf16", 2.25, "PFLOP/s"),  # B200: 2.25 PFLOP/s dense bf16
    ("peak_tflops.fp8", 4.5, "PFLOP/s"),  # B200: 4.5 PFLOP/s dense fp8
    ("memory_bandwidth_gb_per_s", 8, "TB/s"),  # B300: 8 TB/s
], ids=["bandwidth", "bf16", "fp8", "b300-bandwidth"])
def test_a_profile_number_in_the_datasheet_unit_is_refused(field, value, unit, tmp_path):
    """It was planned on: a memory bandwidth of 3.35 GB/s made every decode step a thousand times too slow."""
    path = profile(tmp_path, field, value)
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", f"field '{field}'", unit)
    predict = invoke("predict", *[a.format(hw=path) for a in SERVE_ANY_HW], "--plan", "tp=1")
    assert_user_error(predict, "gpu.yaml", f"field '{field}'")


@pytest.mark.parametrize("field, value", [("memory_bandwidth_gb_per_s", 20), ("peak_tflops.bf16", 3),
                                          ("peak_tflops.tf32", 10)])
def test_a_profile_at_the_floor_still_loads(field, value, tmp_path):
    result = invoke("hardware", "show", profile(tmp_path, field, value))
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("changes", [
    {"memory_bandwidth_gb_per_s": 34, "peak_tflops": {"tf32": 9, "bf16": 18, "fp16": 18, "int8": 36}},  # A2-like
    {"memory_bandwidth_gb_per_s": 272, "peak_tflops": {"tf32": 15.1, "bf16": 30.2, "fp8": 60.4}},  # RTX 4060-like
    {"peak_tflops": {"bf16": 2250, "fp8": 4500, "int8": 153.5, "fp4": 13500},
     "compute_capability": 10.3},  # B300: int8 at 0.07 of bf16 (its own capability: fp4 peaks need 10.0 or later)
], ids=["a2", "rtx-4060", "b300-int8"])
def test_small_and_odd_real_gpus_still_load(changes, tmp_path):
    """A review found the first floors (20 TFLOP/s on every precision, 50 GB/s) refused an A2, an RTX 4060 and a
    Jetson Orin Nano, which loaded before."""
    data = yaml.safe_load(PROFILE)
    data.update(changes)
    data.pop("reference_efficiency", None)
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    result = invoke("hardware", "show", path)
    assert result.exit_code == 0, result.output


# --- 4. validate: a training overlay for none of the rows' GPUs -------------------------------------------------

def overlay(tmp_path: Path, gpu: str) -> Path:
    path = tmp_path / "calib.yaml"
    path.write_text(yaml.safe_dump({"hardware": {gpu: {"efficiency": {"gemm": 0.5}}}}))
    return path


def test_a_training_overlay_of_other_gpus_is_refused_by_validate(tmp_path):
    """The report came out, named the overlay, and held the uncalibrated numbers: nothing in it was applied."""
    result = invoke("validate", RUNS, "--calibration", overlay(tmp_path, "a100-sxm4-80gb"))
    assert_user_error(result, "my_runs.csv", "field '--calibration'", "calibrates a100-sxm4-80gb",
                      "rows run on h100-sxm5-80gb")


def test_a_training_overlay_of_the_rows_gpu_is_applied_by_validate(tmp_path):
    plain = invoke("validate", RUNS, "--json")
    calibrated = invoke("validate", RUNS, "--json", "--calibration", overlay(tmp_path, "h100-sxm5-80gb"))
    assert plain.exit_code == 0 and calibrated.exit_code == 0, calibrated.output
    assert plain.stdout != calibrated.stdout


# --- 5. tune and worker: settings with nothing to act on ------------------------------------------------------

TUNE = ["tune", *SMALL, "--run", "true", "--trials", "1"]


@pytest.mark.parametrize("extra, flag", [
    (["--no-prior", "--prior-top", "5"], "--prior-top"),
    (["--no-prior", "--margin", "0.2"], "--margin"),
    (["--no-prior", "--margin", "0.1"], "--margin"),  # the default value, given: still dropped
], ids=["prior-top", "margin", "margin-default"])
def test_a_prior_setting_with_no_prior_is_refused(extra, flag, tmp_path, monkeypatch):
    """--no-prior queues and skips nothing, so --prior-top and --margin were ignored without a word."""
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*TUNE, "--storage", "sqlite:///s.db", *extra), flag, "--no-prior")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    [*TUNE, "--storage", "journal:./s.log", "--heartbeat", "10"],
    ["search", *SMALL, "--storage", "journal:./s.log", "--study", "s", "--heartbeat", "60"],
    ["worker", "--storage", "journal:./s.log", "--study", "s", "--run", "true", "--heartbeat", "5"],
], ids=["tune", "search", "worker"])
def test_a_heartbeat_with_a_journal_storage_is_refused(args, tmp_path, monkeypatch):
    """Optuna's journal storage keeps no heartbeats: the interval asked for was dropped, stale trials never failed."""
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), "--heartbeat", "journal", "sqlite:///")
    assert list(tmp_path.iterdir()) == []


def test_a_journal_storage_without_a_heartbeat_and_a_heartbeat_on_sqlite_still_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    # --heartbeat left out (its default, 30 s) and --heartbeat 0 (off): nothing asked for is dropped
    for extra in ([], ["--heartbeat", "0"]):
        journal = invoke("search", *SMALL, "--storage", "journal:./s.log", "--study", "s", "--sampler", "random",
                         "--trials", "3", *extra)
        assert journal.exit_code != 2, journal.output  # not refused (3 random trials may find no plan: 1)
        assert "--heartbeat" not in journal.output, journal.output
    sqlite = invoke("search", *SMALL, "--storage", "sqlite:///s.db", "--study", "s", "--sampler", "random",
                    "--trials", "3", "--heartbeat", "10")
    assert sqlite.exit_code != 2, sqlite.output
    assert "--heartbeat" not in sqlite.output, sqlite.output
    assert (tmp_path / "s.log").exists() and (tmp_path / "s.db").exists()


# --- 6. a serving space an aggregated-only engine release cannot search ----------------------------------------

@pytest.fixture()
def disagg_space(tmp_path) -> Path:
    text = (ROOT / "search_spaces" / "serve.yaml").read_text()
    path = tmp_path / "disagg.yaml"
    path.write_text(text.replace("mode: [agg, disagg]", "mode: [disagg]", 1))
    return path


def test_a_disagg_only_space_for_an_aggregated_only_release_is_refused(disagg_space):
    """It ranked mode=agg plans (the release is planned aggregated only) for a space that lists no agg mode."""
    result = invoke("search", *SERVE, "--engine", "trtllm@0.14", "--space", disagg_space)
    assert_user_error(result, "disagg.yaml", "field 'axes.mode'", "trtllm@0.14", "aggregated only", "add agg")


@pytest.mark.parametrize("extra", [["--engine", "trtllm"], ["--engine", "trtllm@0.14", "--fix", "mode=agg"]],
                         ids=["current-release", "agg-fixed"])
def test_a_disagg_only_space_still_searches_where_it_can(extra, disagg_space):
    result = invoke("search", *SERVE, "--top", "1", "--space", disagg_space, *extra)
    assert result.exit_code == 0, result.output
