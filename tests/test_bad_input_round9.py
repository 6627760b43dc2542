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


import pytest

from tests.test_bad_input import ROOT, SERVE, SMALL, assert_user_error, invoke

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
