"""Edges a bad-input sweep (round 6) found by trying the CLI: a benchmark's NaN or infinite peak memory taken as a
measurement, the cost objective at a price of 0, a study re-run that silently did nothing or lowered what it held,
a hand-edited plans.json's search block crashing the report, a search space listing a choice twice, and a database
storage whose driver is not installed.

Each case runs as a person would type it, through typer's CliRunner: a user error is one line naming the file or
flag, the field and a fix, exit status 2, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_bad_input import SMALL, assert_user_error, invoke

HERE = Path(__file__).resolve().parent
SMALL_SPACE = HERE / "bench_scripts" / "space_small.yaml"


def bench(tmp_path: Path, line: str) -> str:
    """A benchmark command that prints ``line`` (its one JSON result line) whatever the plan."""
    script = tmp_path / "bench.py"
    script.write_text(f"print({line!r})\n")
    return f"{sys.executable} {script}"


def tune_args(tmp_path: Path, run: str, *extra: str, study: str = "t") -> list[str]:
    return ["tune", *SMALL, "--space", str(SMALL_SPACE), "--run", run, "--storage", f"sqlite:///{tmp_path}/t.db",
            "--study", study, "--heartbeat", "0", *extra]


# --- 1. a benchmark's peak memory of NaN or infinity is not a measurement ------------------------------------------

HUGE = "1" + "0" * 400  # an integer no float holds


@pytest.mark.parametrize("line, field, shown", [
    ('{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": NaN}', "peak_memory_gib", "nan"),
    ('{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": Infinity}', "peak_memory_gib", "inf"),
    ('{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": 1e999}', "peak_memory_gib", "inf"),
    ('{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": ' + HUGE + "}", "peak_memory_gib", HUGE),
    ('{"tokens_per_s_per_gpu": ' + HUGE + ', "peak_memory_gib": 30}', "tokens_per_s_per_gpu", HUGE),
], ids=["nan", "infinity", "overflow", "huge-int-peak", "huge-int-tokens"])
def test_a_non_finite_benchmark_result_fails_its_trial_with_the_reason(tmp_path, line, field, shown):
    result = invoke(*tune_args(tmp_path, bench(tmp_path, line), "--trials", "1", "--prior-top", "1"))
    assert result.exit_code == 1, result.output  # the study ran; no benchmark run succeeded, and it says why
    assert "Traceback" not in result.output and isinstance(result.exception, SystemExit)
    assert "trial 0 failed" in result.stderr
    assert f"{field} must be a finite" in result.stderr and f"but got {shown}" in result.stderr
    assert "no benchmark run succeeded" in result.stderr


def test_a_finite_peak_memory_is_still_a_measurement(tmp_path):
    line = '{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": NaN}'
    failed = invoke(*tune_args(tmp_path, bench(tmp_path, line), "--trials", "1", "--prior-top", "1", "--json"))
    assert failed.exit_code == 1
    assert json.loads(failed.stdout)["trials"][0]["outcome"] == "failed"
    line = '{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": 30}'
    ok = invoke(*tune_args(tmp_path, bench(tmp_path, line), "--trials", "1", "--prior-top", "1", "--json",
                           study="ok"))
    assert ok.exit_code == 0, ok.output
    assert json.loads(ok.stdout)["best"]["measured"]["peak_memory_gib"] == 30


# --- 2. the cost objective needs a price -----------------------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["search", *SMALL, "--objective", "cost", "--price", "0"],
    ["search", *SMALL, "--objective", "throughput,cost", "--price", "0"],
    ["search", *SMALL[:4], "--gpus", "8..16", *SMALL[6:], "--tokens", "1e9", "--objective", "cost", "--price", "0"],
], ids=["one-cluster", "pareto", "capacity"])
def test_the_cost_objective_at_a_price_of_zero_is_refused(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), "field '--price'", "price > 0 must hold", "--objective cost", "(--price=0)")
    assert list(tmp_path.iterdir()) == []
    # a price of 0 ranks nothing by cost elsewhere: it is still taken, as is the cost objective at a price
    assert invoke("search", *SMALL, "--price", "0").exit_code == 0
    assert invoke("search", *SMALL, "--objective", "cost", "--price", "0.5").exit_code == 0
