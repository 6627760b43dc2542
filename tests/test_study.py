"""Persistent studies: storage URLs, the problem record, measured-trial benchmarks, CLI errors."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from autotune.errors import InputError
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import TrainWorkload
from autotune.search.fingerprint import (
    differences,
    fingerprint,
    parse_storage_url,
    problem_from_fingerprint,
)
from autotune.search.tune import parse_command, run_benchmark
from autotune.training.problem import OBJECTIVES, TrainingProblem
from autotune.training.space import load_space

HERE = Path(__file__).parent
BENCH = HERE / "bench_scripts" / "fake_bench.py"
PLAN = {"tp": 2, "pp": 1, "cp": 1, "ep": 1, "vp": 1, "sp": True, "zero": 1, "mbs": 1, "recompute": "none",
        "precision": "bf16", "offload": "none", "dp": 4}
PLAN_KEY = "tp=2,pp=1,cp=1,ep=1,vp=1,sp=true,zero=1,mbs=1,recompute=none,precision=bf16,offload=none"


def cli(*args, timeout=60, env=None):
    return subprocess.run([sys.executable, "-m", "autotune.cli", *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def problem(gpus=8):
    hw = load_hardware("h100-sxm5-80gb")
    return TrainingProblem.build(load_model("llama3-8b"), Cluster(hw, gpus, 8), TrainWorkload(4096, 32),
                                 load_space(None))


@pytest.mark.parametrize("url,kind", [("sqlite:///a.db", "sqlite"), ("postgresql://u:p@127.0.0.1/db", "postgresql"),
                                      ("postgresql+psycopg2://h/db", "postgresql"), ("journal:./s.log", "journal"),
                                      ("journal:///tmp/s.log", "journal")])
def test_storage_urls(url, kind):
    assert parse_storage_url(url)[0] == kind


@pytest.mark.parametrize("url", ["redis://x", "sqlite://a.db", "", "journal:"])
def test_bad_storage_urls_name_the_field(url):
    with pytest.raises(InputError, match="--storage"):
        parse_storage_url(url)


def test_fingerprint_round_trip_and_differences():
    p = problem()
    objectives = (OBJECTIVES["throughput"],)
    fp = fingerprint(p, objectives)
    json.dumps(fp)
    rebuilt, objs = problem_from_fingerprint(json.loads(json.dumps(fp)))
    assert fingerprint(rebuilt, objs) == fp
    assert rebuilt.choices == p.choices
    diff = differences(fp, fingerprint(problem(16), objectives))
    assert any(line.startswith("cluster.n_gpus: study has 8, this run 16") for line in diff)


def run(tmp_path, code, **kw):
    script = tmp_path / "b.py"
    script.write_text(code)
    return run_benchmark([sys.executable, str(script)], PLAN, estimate={"x": 1}, trial=3, **kw)


def test_benchmark_gets_the_plan_in_the_environment_and_reports_json(tmp_path):
    m = run(tmp_path, "import os, json\n"
            "assert os.environ['AUTOTUNE_TP'] == '2' and os.environ['AUTOTUNE_SP'] == 'true'\n"
            f"assert os.environ['AUTOTUNE_PLAN'] == {PLAN_KEY!r}\n"
            "doc = json.load(open(os.environ['AUTOTUNE_PLAN_JSON']))\n"
            "assert doc['plan']['dp'] == 4 and doc['trial'] == 3\n"
            "print('{\"tokens_per_s_per_gpu\": 1.0}')\n"
            "print(json.dumps({'tokens_per_s_per_gpu': 1234.5, 'peak_memory_gib': 61.0}))\n")
    assert (m.status, m.tokens_per_s_per_gpu, m.peak_memory_gib) == ("ok", 1234.5, 61.0), m


def test_benchmark_result_file_wins(tmp_path):
    m = run(tmp_path, "import os, json\nprint(json.dumps({'tokens_per_s_per_gpu': 1}))\n"
            "json.dump({'tokens_per_s_per_gpu': 99.0}, open(os.environ['AUTOTUNE_RESULT_JSON'], 'w'))\n")
    assert m.tokens_per_s_per_gpu == 99.0


@pytest.mark.parametrize("code,status,reason", [
    ("import sys; print('boom', file=sys.stderr); sys.exit(4)", "failed", "exit status 4"),
    ("import os, signal; os.kill(os.getpid(), signal.SIGSEGV)", "failed", "crashed: killed by SIGSEGV"),
    ("import sys; print('RuntimeError: CUDA out of memory.', file=sys.stderr); sys.exit(1)", "infeasible", "out of memory"),
    ("print('hello')", "failed", "no measurement"),
    ("print('{\"tokens_per_s_per_gpu\": -3}')", "failed", "positive number"),
    ("import time; time.sleep(30)", "failed", "timed out after 0.5 s"),
])
def test_benchmark_failures_keep_reason_and_stderr(tmp_path, code, status, reason):
    m = run(tmp_path, code, timeout_s=0.5)
    assert m.status == status and reason in m.reason, m
    if "boom" in code:
        assert "boom" in m.stderr_tail


def test_command_is_not_run_through_a_shell(tmp_path):
    marker = tmp_path / "injected"
    argv = parse_command(f"{sys.executable} -c 'import sys; print(sys.argv)' '; touch {marker}'", shell=False)
    m = run_benchmark(argv, PLAN, timeout_s=10)
    assert m.status == "failed" and not marker.exists()
    with pytest.raises(InputError, match="--run"):
        parse_command("python 'unclosed", shell=False)


def test_cli_errors_exit_2_without_traceback(tmp_path):
    base = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "32"]
    r = cli(*base, "--storage", "redis://x", "--study", "s")
    assert r.returncode == 2 and "--storage" in r.stderr and "Traceback" not in r.stderr
    # An exact search is now kept in a study (see test_auto_with_storage_...); a storage still needs a study name.
    r = cli(*base, "--storage", f"sqlite:///{tmp_path}/s.db", "--sampler", "exact")
    assert r.returncode == 2 and "--study" in r.stderr
    r = cli("worker", "--storage", f"sqlite:///{tmp_path}/s.db", "--study", "nope")  # no file: not created
    assert r.returncode == 2 and "no such file" in r.stderr and not (tmp_path / "s.db").exists()


def test_search_study_resumes_and_refuses_a_changed_problem(tmp_path):
    url = f"sqlite:///{tmp_path}/s.db"
    base = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "-s", "4096", "-b", "32", "--storage", url,
            "--study", "s", "--json", "--heartbeat", "0", "--sampler", "tpe"]
    first = cli(*base, "--gpus", "8", "--trials", "15")
    assert first.returncode == 0, first.stderr
    again = cli(*base, "--gpus", "8", "--trials", "25")
    assert again.returncode == 0, again.stderr
    doc = json.loads(again.stdout)
    assert set(doc) >= {"plans", "search", "inputs"} and doc["plans"]
    from autotune.search.optuna_study import count_trials, load_records  # noqa: F401

    records = load_records(url, "s")
    assert len(records) == 25 and all(r["state"] == "COMPLETE" for r in records)
    assert all("plan" in r["user_attrs"] for r in records)
    assert any("estimate" in r["user_attrs"] for r in records)
    changed = cli(*base, "--gpus", "16", "--trials", "25")
    assert changed.returncode == 2 and "cluster.n_gpus: study has 8, this run 16" in changed.stderr
    assert "--new" in changed.stderr
    replaced = cli(*base, "--gpus", "16", "--trials", "8", "--new")
    assert replaced.returncode == 0, replaced.stderr
    assert len(load_records(url, "s")) == 8


# --- auto with a storage: exact when the space is small, kept in the study ------------------------------------


def test_auto_with_storage_still_searches_exactly_and_keeps_it_in_the_study(tmp_path):
    import time

    from autotune.search.optuna_study import EXACT_ATTR, load_records

    url = f"sqlite:///{tmp_path}/s.db"
    base = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "32", "--json"]
    plain = json.loads(cli(*base).stdout)
    started = time.perf_counter()
    stored = cli(*base, "--storage", url, "--study", "s")
    took = time.perf_counter() - started
    assert stored.returncode == 0, stored.stderr
    doc = json.loads(stored.stdout)
    assert doc["search"]["sampler"] == "exact"
    assert doc["search"]["evaluations"] == plain["search"]["evaluations"]
    assert [p["plan"] for p in doc["plans"]] == [p["plan"] for p in plain["plans"]]
    records = load_records(url, "s")
    assert [r["user_attrs"]["plan"] for r in records] == [p["plan"] for p in doc["plans"]]
    assert all(r["state"] == "COMPLETE" and r["user_attrs"]["outcome"] == "evaluated" for r in records)
    import optuna

    summary = optuna.load_study(study_name="s", storage=url).user_attrs[EXACT_ATTR]
    assert summary["evaluations"] == plain["search"]["evaluations"] and summary["recorded"] == len(records)
    print(f"exact search kept in a new SQLite study: {took:.2f} s for the whole command")
    # Again: nothing added twice; a worker has nothing to do; the report reads the study.
    again = cli(*base, "--storage", url, "--study", "s")
    assert again.returncode == 0 and len(load_records(url, "s")) == len(records)
    worker = cli("worker", "--storage", url, "--study", "s")
    assert worker.returncode == 0 and "searched exactly" in worker.stdout
    report = cli("report", "--storage", url, "--study", "s", "--out", str(tmp_path / "rep"), "--trials", "10")
    assert report.returncode == 0, report.stderr
    assert "searched exactly" in (tmp_path / "rep" / "report.html").read_text()


def test_auto_continues_a_study_with_the_sampler_it_was_searched_with(tmp_path):
    from autotune.search.optuna_study import load_records

    url = f"sqlite:///{tmp_path}/s.db"
    base = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "32", "--json",
            "--storage", url, "--study", "s", "--heartbeat", "0", "--space",
            str(HERE / "bench_scripts" / "space_small.yaml")]
    first = cli(*base, "--sampler", "random", "--trials", "6")
    assert first.returncode == 0, first.stderr
    again = cli(*base, "--trials", "9")  # --sampler auto (the default)
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["search"]["sampler"] == "random"
    assert len(load_records(url, "s")) == 9


def test_tune_exits_1_and_says_why_when_no_benchmark_run_succeeded(tmp_path):
    url = f"sqlite:///{tmp_path}/t.db"
    args = ["tune", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "32", "--space",
            str(HERE / "bench_scripts" / "space_small.yaml"), "--storage", url, "--trials", "2", "--prior-top", "2",
            "--run", f"{sys.executable} -c 'import sys; sys.exit(3)'", "--calibrate", str(tmp_path / "c.yaml")]
    r = cli(*args, timeout=120)
    assert r.returncode == 1, r.stderr
    assert "no benchmark run succeeded" in r.stderr and "exit status 3 (2x)" in r.stderr
    assert "Traceback" not in r.stderr and not (tmp_path / "c.yaml").exists()
    r = cli(*args, "--json", timeout=120)
    assert r.returncode == 1 and json.loads(r.stdout)["best"] is None
