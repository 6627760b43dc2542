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

from tests.test_bad_input import SERVE, SMALL, assert_user_error, invoke

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


# --- 3. a study re-run that has nothing to run, or other settings than the study's ----------------------------------

def _stored(tmp_path: Path, study: str = "t") -> tuple[int, dict]:
    import optuna

    loaded = optuna.load_study(study_name=study, storage=f"sqlite:///{tmp_path}/t.db")
    return loaded.user_attrs["autotune.target_trials"], loaded.user_attrs["autotune.settings"]


OK_LINE = '{"tokens_per_s_per_gpu": 1000, "peak_memory_gib": 30}'


def test_a_tune_rerun_with_no_more_trials_says_nothing_is_run_and_keeps_the_target(tmp_path):
    run = bench(tmp_path, OK_LINE)
    assert invoke(*tune_args(tmp_path, run, "--trials", "2", "--prior-top", "2")).exit_code == 0
    for trials in ("2", "1"):
        again = invoke(*tune_args(tmp_path, run, "--trials", trials, "--prior-top", "2"))
        assert again.exit_code == 0, again.output
        assert (f"the study 't' in sqlite:///{tmp_path}/t.db already holds 2 trials (--trials {trials}): nothing to "
                "run; raise --trials to run more") in again.stderr
        assert "trial " not in again.stderr.replace("trials", "")  # no benchmark ran
        assert _stored(tmp_path)[0] == 2  # the study's target, which its workers run up to, is not lowered
    assert "the study's target for its workers stays 2" in again.stderr
    more = invoke(*tune_args(tmp_path, run, "--trials", "3", "--prior-top", "2"))
    assert more.exit_code == 0 and "continuing study 't': 2 trials so far, up to 3 in total" in more.stderr
    assert _stored(tmp_path)[0] == 3


def test_a_search_rerun_with_no_more_trials_says_nothing_is_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = ["search", *SMALL, "--space", SMALL_SPACE, "--fix", "tp=1", "--fix", "pp=1", "--sampler", "random",
            "--storage", "sqlite:///s.db", "--study", "s", "--heartbeat", "0"]
    assert invoke(*args, "--trials", "4").exit_code == 0
    again = invoke(*args, "--trials", "3")
    assert again.exit_code == 0, again.output
    said = " ".join(again.stdout.split())
    assert ("the study 's' in sqlite:///s.db already holds 4 trials (--trials 3): nothing to run; raise --trials to "
            "run more") in said


@pytest.mark.parametrize("changed, given", [
    (["--margin", "0.3"], "--margin 0.3"),
    (["--no-prior"], "--no-prior"),
])
def test_a_tune_rerun_with_another_margin_is_refused_naming_both(changed, given, tmp_path):
    run = bench(tmp_path, OK_LINE)
    assert invoke(*tune_args(tmp_path, run, "--trials", "1", "--prior-top", "1")).exit_code == 0
    before = _stored(tmp_path)
    prior = [] if "--no-prior" in changed else ["--prior-top", "1"]  # --prior-top with --no-prior: refused (round 9)
    assert_user_error(invoke(*tune_args(tmp_path, run, "--trials", "2", *prior, *changed)),
                      "field '--margin'", f"({given}; study 't': --margin 0.1)", "give --margin 0.1", "--new")
    assert _stored(tmp_path) == before  # nothing ran and nothing stored was changed


def test_a_tune_rerun_says_which_other_settings_it_takes(tmp_path):
    run = bench(tmp_path, OK_LINE)
    assert invoke(*tune_args(tmp_path, run, "--trials", "1", "--prior-top", "1")).exit_code == 0
    again = invoke(*tune_args(tmp_path, run, "--trials", "2", "--prior-top", "2", "--sampler", "random",
                              "--trial-timeout", "60"))
    assert again.exit_code == 0, again.output
    said = " ".join(again.stderr.split())
    assert "study 't' was sampled with tpe: this run, and workers that join from now on, sample with random" in said
    assert "--trial-timeout: 60 s from now on" in said and "(study 't' had none)" in said
    assert "--prior-top 2 changes nothing: study 't' queued its prior (1 plans) when it began" in said
    target, settings = _stored(tmp_path)
    assert target == 2 and settings["sampler"] == "random" and settings["trial_timeout"] == 60
    assert settings["prior_top"] == 1  # what the study queued, not what this run asked for


# --- 4. a hand-edited plans.json's search block is refused where the file is read -----------------------------------

@pytest.fixture(scope="module")
def written_plans(tmp_path_factory):
    """A training and a serving plans.json, as `autotune search --out` writes them."""
    base = tmp_path_factory.mktemp("plans")
    for kind, args in (("train", SMALL), ("serve", SERVE)):
        result = invoke("search", *args, "--out", base / kind)
        assert result.exit_code == 0, result.output
    return {kind: json.loads((base / kind / "plans.json").read_text()) for kind in ("train", "serve")}


@pytest.mark.parametrize("kind, field, value", [
    ("train", "evaluations", None),
    ("train", "space_size", None),
    ("train", "feasible", None),
    ("train", "objectives", 3),
    ("train", "objectives", "throughput"),
    ("train", "objectives", ["speed"]),  # ranked by throughput under another name before
    ("train", "evaluations", 10**30),
    ("train", "sampler", 5),
    ("serve", "evaluations", 10**30),
    ("serve", "space_size", None),
    ("serve", "meeting_targets", 10**30),
])
def test_a_hand_edited_search_block_is_refused_naming_the_field(kind, field, value, written_plans, tmp_path):
    document = json.loads(json.dumps(written_plans[kind]))
    document["search"][field] = value
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(document))
    extra = ["--trials", "0"] if kind == "train" else []
    result = invoke("report", path, "--out", tmp_path / "report", *extra)
    assert_user_error(result, str(path), f"field 'search.{field}'", f"{field}={value!r}", "rerun `autotune search")
    assert not (tmp_path / "report").exists()


def test_a_search_block_that_is_not_an_object_is_refused_by_every_reader(written_plans, tmp_path):
    document = dict(written_plans["train"], search=[1, 2])
    path = tmp_path / "plans.json"
    path.write_text(json.dumps(document))
    assert_user_error(invoke("report", path, "--out", tmp_path / "r", "--trials", "0"), "field 'search'")
    assert_user_error(invoke("explain", path), "field 'search'")
    # the file as written still reads
    path.write_text(json.dumps(written_plans["train"]))
    assert invoke("explain", path).exit_code == 0


# --- 5. a search space listing a choice twice -----------------------------------------------------------------------

@pytest.mark.parametrize("old, new, field, said", [
    ("tp: [1, 2, 4, 8]", "tp: [2, 2, 4]", "axes.tp", "(tp=[2, 2, 4]: 2 twice)"),
    ("sp: [false, true]", 'sp: [false, "true", true]', "axes.sp", "'true' and true, the same choice"),
    ("mbs: [1, 2]", "mbs: [1, 2, 1]", "axes.mbs", "1 twice"),
])
@pytest.mark.parametrize("command", ["search", "tune"])
def test_a_training_space_listing_a_choice_twice_is_refused(command, old, new, field, said, tmp_path):
    text = SMALL_SPACE.read_text()
    assert old in text
    path = tmp_path / "space.yaml"
    path.write_text(text.replace(old, new))
    args = [command, *SMALL, "--space", path]
    if command == "tune":
        args += ["--run", "true", "--storage", f"sqlite:///{tmp_path}/t.db"]
    assert_user_error(invoke(*args), "space.yaml", f"field '{field}'", said, "remove the repeat")
    assert not (tmp_path / "t.db").exists()


def test_a_serving_space_listing_a_choice_twice_is_refused(tmp_path):
    path = tmp_path / "serve-space.yaml"
    path.write_text("axes:\n  tp: [1, 2, 4, 8]\n  pp: [1]\n  dp: [1]\n  weights: [bf16, BF16]\n  kv: [bf16]\n"
                    "  max_batch: [64, 128]\n")
    assert_user_error(invoke("search", *SERVE, "--space", path), "serve-space.yaml", "field 'axes.weights'",
                      "bf16 and BF16, the same choice")
    path.write_text(path.read_text().replace("[bf16, BF16]", "[bf16]"))
    assert invoke("search", *SERVE, "--space", path).exit_code == 0


# --- 6. a database storage whose driver is not installed -----------------------------------------------------------

@pytest.mark.parametrize("url, shown, module, package", [
    ("mysql://me:secret@localhost/db", "mysql://me:***@localhost/db", "MySQLdb", "mysqlclient"),
    ("mysql+pymysql://me:secret@localhost/db", "mysql+pymysql://me:***@localhost/db", "pymysql", "PyMySQL"),
    ("postgresql+psycopg2://me:secret@localhost/db", "postgresql+psycopg2://me:***@localhost/db", "psycopg2",
     "psycopg2-binary"),
])
@pytest.mark.parametrize("command", ["worker", "search", "report"])
def test_a_storage_whose_driver_is_missing_names_the_url_and_the_package(command, url, shown, module, package,
                                                                         tmp_path, monkeypatch):
    # the driver is made missing whether or not it is installed here (None in sys.modules fails its import)
    monkeypatch.setitem(sys.modules, module, None)
    monkeypatch.chdir(tmp_path)
    args = {"worker": ["worker", "--storage", url, "--study", "s"],
            "search": ["search", *SMALL, "--storage", url, "--study", "s"],
            "report": ["report", "--storage", url, "--study", "s", "--out", "r"]}[command]
    result = invoke(*args)
    assert_user_error(result, "field '--storage'", f"{shown} needs the database driver {module!r}",
                      f"pip install {package}")
    assert "secret" not in result.output and "Failed to import" not in result.output
    assert list(tmp_path.iterdir()) == []


def test_a_search_rerun_with_json_says_nothing_is_run_on_stderr(tmp_path, monkeypatch):
    """With --json the study's notes were printed nowhere: stdout holds the JSON only, so they go to stderr."""
    monkeypatch.chdir(tmp_path)
    args = ["search", *SMALL, "--space", SMALL_SPACE, "--fix", "tp=1", "--fix", "pp=1", "--sampler", "random",
            "--storage", "sqlite:///s.db", "--study", "s", "--heartbeat", "0", "--json"]
    assert invoke(*args, "--trials", "4").exit_code == 0
    again = invoke(*args, "--trials", "3")
    assert again.exit_code == 0, again.output
    json.loads(again.stdout)
    assert "nothing to run; raise --trials to run more" in " ".join(again.stderr.split())
