"""Several worker processes on one study; SIGKILL mid-study; measured trials with failures.

The PostgreSQL test runs when AUTOTUNE_TEST_POSTGRES_URL is set (.ci/postgres.sh starts a
server on loopback and exports it); SQLite and the journal file always run.
"""

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

import pytest

from autotune.search.optuna_study import load_records
from autotune.training.plan import canonical_fields

HERE = Path(__file__).parent
BENCH = HERE / "bench_scripts" / "fake_bench.py"
SPACE = HERE / "bench_scripts" / "space_small.yaml"
SEARCH = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "32"]
PG_URL = os.environ.get("AUTOTUNE_TEST_POSTGRES_URL")
# CI starts a server (.ci/postgres.sh) and sets AUTOTUNE_REQUIRE_POSTGRES=1: there a missing server fails.
PG_REQUIRED = os.environ.get("AUTOTUNE_REQUIRE_POSTGRES") == "1"


def _need_postgres() -> None:
    if PG_URL:
        return
    if PG_REQUIRED:
        pytest.fail("AUTOTUNE_REQUIRE_POSTGRES=1 but AUTOTUNE_TEST_POSTGRES_URL is unset: .ci/postgres.sh failed")
    pytest.skip("AUTOTUNE_TEST_POSTGRES_URL is unset: no PostgreSQL server (.ci/postgres.sh starts one)")


def autotune(*args):
    return [sys.executable, "-m", "autotune.cli", *args]


def counted(records, measured=False):
    out = []
    for r in records:
        a = r["user_attrs"]
        if r["state"] == "WAITING" or a.get("outcome") == "surplus":
            continue
        if r["state"] == "FAIL" and a.get("outcome") is None:
            continue  # killed (stale or gone) and run again
        if measured and not (a.get("slot") and a.get("outcome") in ("ok", "failed", "infeasible")):
            continue
        out.append(r)
    return out


def four_workers(url, trials=40):
    study = f"w{uuid.uuid4().hex[:8]}"
    procs = [subprocess.Popen(autotune("search", *SEARCH, "--space", str(SPACE), "--storage", url, "--study", study, "--trials", str(trials),
                                       "--sampler", "tpe", "--json"), stdout=subprocess.PIPE, stderr=subprocess.PIPE)]
    procs += [subprocess.Popen(autotune("worker", "--storage", url, "--study", study, "--wait", "60", "--json"),
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE) for _ in range(3)]
    outs = [p.communicate(timeout=120) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0, err.decode()[-2000:]
    records = load_records(url, study)
    numbers = [r["number"] for r in records]
    assert len(numbers) == len(set(numbers))
    assert len(counted(records)) == trials, Counter(r["user_attrs"].get("outcome") for r in records)
    evaluated = [r["user_attrs"]["plan_key"] for r in records if r["user_attrs"].get("outcome") == "evaluated"]
    twice = [k for k, n in Counter(evaluated).items() if n > 1]
    assert twice == [], f"plans evaluated twice: {twice}"
    done_by = [json.loads(out)["done_here"] for out, _ in outs[1:]]
    return records, done_by


def test_four_workers_sqlite(tmp_path):
    _, done_by = four_workers(f"sqlite:///{tmp_path}/w.db", trials=24)
    assert sum(done_by) > 0  # the workers did take part


def test_four_workers_journal(tmp_path):
    four_workers(f"journal:{tmp_path}/w.log")


def test_four_workers_postgres():
    _need_postgres()
    four_workers(PG_URL, trials=60)


# --- measured trials -------------------------------------------------------------------------


def make_table(tmp_path):
    """Throughput of every plan: the cost model's prediction, distorted; some plans fail."""
    from autotune.inputs.hardware import Cluster, load_hardware
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import TrainWorkload
    from autotune.search.exact import exact_search
    from autotune.search.tune import prior_plans
    from autotune.training.problem import TrainingProblem
    from autotune.training.space import load_space

    hw = load_hardware("h100-sxm5-80gb")
    problem = TrainingProblem.build(load_model("llama3-8b"), Cluster(hw, 8, 8), TrainWorkload(4096, 32),
                                    load_space(str(SPACE)))
    table = {}
    for batch, est in exact_search(problem).estimates:
        for i in range(len(batch)):
            plan = batch.plan(i)
            key = plan.as_string()
            if est.memory_gib_per_gpu[i] > hw.memory_gib:
                table[key] = {"oom": True}
            else:
                table[key] = {"tokens": round(float(est.tokens_per_s_per_gpu[i]) * (0.9 if plan.pp > 1 else 0.85), 1)}
    # As the benchmark sees it in AUTOTUNE_PLAN: the plan string (etp and schedule only where not default).
    top = [",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                    for k, v in canonical_fields(p).items() if k != "dp")
           for p in prior_plans(problem, 10, 0.10)]
    table[top[0]] = {"crash": True}
    table[top[1]] = {"timeout": True}
    table[top[2]] = {"oom": True}
    # The machine's best: the first plan after those three that the model ranks lower (its sixth, or later).
    sixth = next(k for k in top[5:] if "tokens" in table[k])
    table[sixth] = {"tokens": table[sixth]["tokens"] * 1.4}
    best = max((k for k, v in table.items() if "tokens" in v), key=lambda k: table[k]["tokens"])
    path = tmp_path / "table.json"
    path.write_text(json.dumps(table))
    return path, best, top.index(sixth) + 1


def tune_cmd(url, study, trials, *extra):
    return autotune("tune", *SEARCH, "--space", str(SPACE), "--storage", url, "--study", study, "--trials", str(trials),
                    "--run", f"{sys.executable} {BENCH}", "--trial-timeout", "1", *extra)


def test_tune_finds_the_best_plan_and_records_failures(tmp_path):
    table, best, prior_rank = make_table(tmp_path)
    env = {**os.environ, "FAKE_BENCH_TABLE": str(table)}
    url = f"sqlite:///{tmp_path}/t.db"
    r = subprocess.run(tune_cmd(url, "prior", 8, "--json", "--calibrate", str(tmp_path / "calib.yaml")),
                       capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    doc = json.loads(r.stdout)
    assert doc["best"]["plan"] and doc["study"]["runs"] == 8
    best_key = ",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}"
                        for k, v in canonical_fields(doc["best"]["plan"]).items() if k != "dp")
    assert best_key == best
    # The prior runs the model's ranking in order, so the best is found at its place in that ranking.
    assert doc["study"]["trials_to_best"] <= prior_rank
    reasons = {t["outcome"]: t["failure_reason"] for t in doc["trials"] if t["outcome"] != "ok"}
    assert "exit status 3" in reasons["failed"] or "timed out" in reasons["failed"]
    failed = [t for t in doc["trials"] if t["outcome"] == "failed"]
    assert {t["failure_reason"].split(" ")[0] for t in failed} == {"exit", "timed"}
    assert any("NCCL error" in (t["stderr_tail"] or "") for t in failed)
    assert reasons["infeasible"].startswith("out of memory")
    ok = [t for t in doc["trials"] if t["outcome"] == "ok"]
    assert all(t["predicted_tokens_per_s_per_gpu"] and t["error_pct"] is not None for t in ok)
    assert (tmp_path / "calib.yaml").exists() and "calibration" in doc
    # Without the prior: plain TPE on measurements, same budget (a figure for the note, not a claim).
    r = subprocess.run(tune_cmd(url, "noprior", 8, "--json", "--no-prior"), capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    print("trials to best with prior:", doc["study"]["trials_to_best"], "without:",
          json.loads(r.stdout)["study"]["trials_to_best"])


def test_a_worker_hands_its_benchmark_runs_the_inputs_tune_does(tmp_path):
    """The plan file of a worker's run holds the same inputs (model, workload, cluster, ...) as tune's runs: a
    benchmark that reads the sequence length or global batch from it measures the same workload either way (a
    worker's runs had been handed only the study's name)."""
    runs = tmp_path / "runs"
    runs.mkdir()
    env = {**os.environ, "FAKE_BENCH_INPUTS_DIR": str(runs)}
    url = f"sqlite:///{tmp_path}/t.db"
    r = subprocess.run(tune_cmd(url, "inputs", 1, "--prior-top", "1"), capture_output=True, text=True, env=env,
                       timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    r = subprocess.run(autotune("worker", "--storage", url, "--study", "inputs", "--trials", "3", "--run",
                                f"{sys.executable} {BENCH}"), capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    handed = [json.loads(p.read_text()) for p in runs.iterdir()]
    assert len(handed) >= 2 and all(h == handed[0] for h in handed)
    assert handed[0]["seq_len"] == 4096 and handed[0]["global_batch"] == 32 and handed[0]["model"] == "llama3-8b"


def test_a_worker_whose_every_run_failed_exits_1_and_a_bad_timeout_is_refused(tmp_path):
    """A worker on a host where the benchmark cannot run says so and exits 1 (it had exited 0, its failures
    counted toward the study's target); --trial-timeout must be > 0, as for tune."""
    url = f"sqlite:///{tmp_path}/t.db"
    r = subprocess.run(tune_cmd(url, "broken", 1, "--prior-top", "1"), capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    worker = ["worker", "--storage", url, "--study", "broken"]
    r = subprocess.run(autotune(*worker, "--trials", "2", "--run", "false"), capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 1 and "no benchmark run of this worker succeeded" in r.stderr and "exit status 1" in r.stderr
    assert "Traceback" not in r.stderr
    r = subprocess.run(autotune(*worker, "--trials", "3", "--run", "true", "--trial-timeout", "-5"),
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and "--trial-timeout" in r.stderr and "must be > 0" in r.stderr


def test_sigkill_loses_no_trial_and_the_stale_one_is_retried(tmp_path):
    table, _, _ = make_table(tmp_path)
    env = {**os.environ, "FAKE_BENCH_TABLE": str(table), "FAKE_BENCH_SLEEP": "0.4"}
    url = f"sqlite:///{tmp_path}/k.db"
    cmd = tune_cmd(url, "kill", 8, "--heartbeat", "1", "--prior-top", "0")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True)
    reported = []
    deadline = time.monotonic() + 60
    while len(reported) < 3 and time.monotonic() < deadline:
        line = proc.stderr.readline()
        if line.startswith("trial ") and line.split()[2] in ("ok", "failed", "infeasible"):
            reported.append(int(line.split()[1]))
    time.sleep(0.25)  # the next trial is running
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    before = {r["number"]: r for r in load_records(url, "kill")}
    lost = [n for n in reported if n not in before or before[n]["state"] not in ("COMPLETE", "FAIL")]
    assert lost == []
    assert any(r["state"] == "RUNNING" for r in before.values())
    time.sleep(3.2)  # heartbeat 1 s: stale after 3 s
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    after = {r["number"]: r for r in load_records(url, "kill")}
    for n in reported:
        assert after[n]["state"] == before[n]["state"] and after[n]["values"] == before[n]["values"]
    stale = [r for r in after.values() if r["state"] == "FAIL" and "outcome" not in r["user_attrs"]]
    assert stale and not any(r["state"] == "RUNNING" for r in after.values())
    retried = [r for r in after.values() if r["retry_of"] is not None]
    assert {r["retry_of"] for r in retried} == {s["number"] for s in stale}
    assert len(counted(list(after.values()), measured=True)) == 8


# --- --trials N means N finished trials, after a SIGKILL and a resume with the same command ------------------


def _running(url: str, study: str) -> int:
    try:
        return sum(r["state"] == "RUNNING" for r in load_records(url, study))
    except Exception:  # noqa: BLE001 - the study may not exist yet
        return 0


def _kill_mid_trial(cmd: list[str], url: str, study: str, env: dict, at_least: int) -> bool:
    """Start ``cmd`` and SIGKILL it while one of its trials is RUNNING, after ``at_least`` finished trials.
    True when the kill left a trial RUNNING.

    Only a trial that has named its process counts: one killed in the instant between Optuna creating it and
    the process naming itself is a different case (dead only after ``_UNCLAIMED_S``), not a kill mid-trial."""
    import optuna

    from autotune.search.optuna_study import WORKER_ATTR, make_storage

    storage = make_storage(url)
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env)
    deadline = time.monotonic() + 120
    try:
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                trials = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
            except Exception:  # noqa: BLE001 - not created yet, or the database is busy
                trials = []
            done = sum(t.state.is_finished() for t in trials)
            if done >= at_least and any(t.state == optuna.trial.TrialState.RUNNING and WORKER_ATTR in t.system_attrs
                                        for t in trials):
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.005)
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()
    # the process may have finished that trial and opened the next between the look and the kill: a trial it had
    # not yet named is the other case (above), so such an attempt does not count
    after = optuna.load_study(study_name=study, storage=storage).get_trials(deepcopy=False)
    running = [t for t in after if t.state == optuna.trial.TrialState.RUNNING]
    return bool(running) and all(WORKER_ATTR in t.system_attrs for t in running)


@pytest.mark.parametrize("backend", ["sqlite", "postgresql"])
def test_search_killed_mid_trial_and_resumed_ends_with_exactly_trials_finished(backend, tmp_path):
    if backend == "postgresql":
        _need_postgres()
    url = PG_URL if backend == "postgresql" else f"sqlite:///{tmp_path}/k.db"
    trials = 12
    for attempt in range(6):  # the kill must land while a trial runs; try again if it landed between trials
        study = f"kill{uuid.uuid4().hex[:8]}"
        # Default heartbeat (30 s): the killed trial is not stale yet when the same command runs again.
        cmd = autotune("search", *SEARCH, "--space", str(SPACE), "--storage", url, "--study", study,
                       "--trials", str(trials), "--sampler", "random", "--json")
        if _kill_mid_trial(cmd, url, study, dict(os.environ), at_least=3 + attempt):
            break
    else:
        pytest.fail("could not kill the search while a trial was running")
    before = {r["number"]: r for r in load_records(url, study)}
    killed = [n for n, r in before.items() if r["state"] == "RUNNING"]
    again = subprocess.run(cmd, capture_output=True, text=True, timeout=180)
    assert again.returncode == 0, again.stderr[-3000:]
    after = load_records(url, study)
    assert not any(r["state"] == "RUNNING" for r in after)
    assert len(counted(after)) == trials
    failed = {r["number"] for r in after if r["state"] == "FAIL" and r["user_attrs"].get("outcome") is None}
    assert set(killed) <= failed
    assert {r["retry_of"] for r in after if r["retry_of"] is not None} >= set(killed)


def test_a_trial_stopped_by_sigterm_runs_again_on_resume(tmp_path):
    """A scheduler's SIGTERM (or Ctrl-C) mid-benchmark: tune exits 143, and the plan it was measuring -- the cost
    model's best, queued first -- is measured when the same command runs again (it had stayed failed, unrun)."""
    import optuna

    from autotune.search.optuna_study import WORKER_ATTR, make_storage

    url = f"sqlite:///{tmp_path}/t.db"
    cmd = tune_cmd(url, "term", 3, "--prior-top", "2")
    cmd[cmd.index("--trial-timeout") + 1] = "60"  # the benchmark sleeps until it is stopped
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "FAKE_BENCH_SLEEP": "30"})
    storage, first = make_storage(url), None
    deadline = time.monotonic() + 60
    while first is None and time.monotonic() < deadline and proc.poll() is None:
        try:
            trials = optuna.load_study(study_name="term", storage=storage).get_trials(deepcopy=False)
        except Exception:  # noqa: BLE001 - not created yet, or the database is busy
            trials = []
        first = next((t for t in trials if t.state == optuna.trial.TrialState.RUNNING and WORKER_ATTR in t.system_attrs
                      and "plan_key" in t.user_attrs), None)
        time.sleep(0.05)
    assert first is not None, "tune never started a benchmark"
    time.sleep(0.5)  # the benchmark runs
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=60) == 143, proc.stderr.read()[-2000:]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    after = load_records(url, "term")
    stopped = next(x for x in after if x["number"] == first.number)
    assert stopped["state"] == "FAIL" and stopped["user_attrs"].get("outcome") is None
    again = [x for x in after if x["retry_of"] == first.number]
    assert len(again) == 1 and again[0]["user_attrs"]["outcome"] == "ok"
    assert again[0]["user_attrs"]["plan_key"] == first.user_attrs["plan_key"]
    assert len(counted(after, measured=True)) == 3


def test_tune_killed_mid_benchmark_and_resumed_at_once_ends_with_exactly_trials_finished(tmp_path):
    table, _, _ = make_table(tmp_path)
    env = {**os.environ, "FAKE_BENCH_TABLE": str(table), "FAKE_BENCH_SLEEP": "0.4"}
    url = f"sqlite:///{tmp_path}/t.db"
    for attempt in range(4):
        study = f"kill{attempt}"
        cmd = tune_cmd(url, study, 4, "--prior-top", "0")  # default heartbeat: nothing is stale on resume
        if _kill_mid_trial(cmd, url, study, env, at_least=1):
            break
    else:
        pytest.fail("could not kill tune while a benchmark was running")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=120)
    assert r.returncode == 0, r.stderr[-3000:]
    after = load_records(url, study)
    assert not any(x["state"] == "RUNNING" for x in after)
    assert len(counted(after, measured=True)) == 4
    assert "queued to run again" in r.stdout + r.stderr


def test_an_unclaimed_running_trial_is_dead_only_after_its_grace(tmp_path, monkeypatch):
    """A RUNNING trial that never named its process (killed between Optuna creating it and the process naming
    itself) is left alone while it is young -- its process may be naming itself right now -- and failed and
    queued again once it is older than _UNCLAIMED_S."""
    import optuna

    from autotune.search import optuna_study as S

    study = optuna.create_study(storage=S.make_storage(f"sqlite:///{tmp_path}/u.db"), study_name="u")
    trial = study.ask()  # RUNNING; a plain sampler names no process
    assert S.WORKER_ATTR not in study.trials[0].system_attrs
    assert S.fail_dead_trials(study) == []
    monkeypatch.setattr(S, "_UNCLAIMED_S", -1.0)
    assert S.fail_dead_trials(study) == [trial.number]
    states = [t.state for t in study.get_trials(deepcopy=False)]
    assert states == [optuna.trial.TrialState.FAIL, optuna.trial.TrialState.WAITING]
