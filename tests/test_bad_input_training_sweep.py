"""Training commands on input a second hostile-input sweep found mishandled: study storages that are not one (in
memory, another program's SQLite database, a journal cut short, the --calibrate file), flags capacity planning
ignored, MoE imbalance beyond what routing can give, implausible measured memory, hopeless spaces that ran trials,
and the messages around them."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import sys
import time

import pytest

from tests.test_bad_input import ROOT, SMALL, assert_user_error, invoke, predicted

TPE = ["--sampler", "tpe", "--trials", "3"]


# --- study storages ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("url", ["sqlite:///:memory:", "sqlite:///", "sqlite:///file:s.db?mode=memory&uri=true"])
@pytest.mark.parametrize("command", ["search", "tune"])
def test_an_sqlite_database_in_memory_is_refused_as_a_study_storage(url, command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    extra = TPE + ["--study", "s"] if command == "search" else ["--run", "true", "--heartbeat", "1"]
    result = invoke(command, *SMALL, "--storage", url, *extra)
    assert_user_error(result, "--storage", "in memory", "sqlite:///study.db")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("tables", [["notes"], ["notes", "trials"]])  # a table named as one of Optuna's too
def test_another_programs_sqlite_database_is_not_given_optuna_tables(tables, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    with sqlite3.connect(tmp_path / "mine.db") as db:
        for table in tables[1:]:
            db.execute(f"CREATE TABLE {table} (id INTEGER)")
        db.execute("CREATE TABLE notes (text TEXT)")
        db.execute("INSERT INTO notes VALUES ('keep me')")
    before = (tmp_path / "mine.db").read_bytes()
    result = invoke("search", *SMALL, "--storage", "sqlite:///mine.db", "--study", "s", *TPE)
    assert_user_error(result, "--storage", "mine.db", "not an Optuna study database", "new file")
    assert (tmp_path / "mine.db").read_bytes() == before


def test_an_empty_sqlite_database_and_a_study_database_are_still_taken(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    sqlite3.connect(tmp_path / "empty.db").execute("PRAGMA user_version = 1").connection.commit()
    for _ in range(2):  # created, then continued
        result = invoke("search", *SMALL, "--storage", "sqlite:///empty.db", "--study", "s", *TPE)
        assert result.exit_code in (0, 1), result.output
        assert "error:" not in result.stderr


def _journal(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    first = invoke("search", *SMALL, "--storage", "journal:s.log", "--study", "s", *TPE)
    assert "error:" not in first.stderr, first.output
    return tmp_path / "s.log"


@pytest.mark.parametrize("url", ["sqlite:///nodir/x/s.db", "journal:nodir/x/s.log"])
def test_a_storage_in_a_folder_that_does_not_exist_names_the_folder(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("search", *SMALL, "--storage", url, "--study", "s", *TPE)
    assert_user_error(result, "--storage", "the folder 'nodir/x'", "does not exist", "mkdir -p nodir/x")
    assert not (tmp_path / "nodir").exists()


def test_a_journal_cut_short_is_refused_naming_its_last_line(tmp_path, monkeypatch):
    log = _journal(tmp_path, monkeypatch)
    whole = log.read_bytes()
    lines = whole.count(b"\n")
    log.write_bytes(whole[:-20])  # the last record cut short
    result = invoke("search", *SMALL, "--storage", "journal:s.log", "--study", "s", "--sampler", "tpe", "--trials", "5")
    assert_user_error(result, "--storage", "s.log", f"partial line (line {lines}", f"head -n {lines - 1}")
    assert log.read_bytes() == whole[:-20]  # nothing joined to it
    # a report only reads the study: Optuna reads up to the partial line, and nothing is written
    report = invoke("report", "--storage", "journal:s.log", "--study", "s", "--trials", "0", "--out", "rep")
    assert "--storage" not in report.output and "study 's'" in report.output  # read: it is the study that is short
    assert log.read_bytes() == whole[:-20]
    log.write_bytes(whole[:-20] + b'{"op_code": 0}\n')  # cut short, then another record joined to it
    again = invoke("worker", "--storage", "journal:s.log", "--study", "s")
    assert_user_error(again, "--storage", f"line {lines}", "not one whole JSON record")
    log.write_bytes(b"".join(whole.splitlines(keepends=True)[:-1]))  # the fix the message gives
    fixed = invoke("search", *SMALL, "--storage", "journal:s.log", "--study", "s", "--sampler", "tpe", "--trials", "5")
    assert "error:" not in fixed.stderr, fixed.output


def test_a_damaged_line_inside_a_journal_is_named(tmp_path, monkeypatch):
    log = _journal(tmp_path, monkeypatch)
    lines = log.read_bytes().splitlines(keepends=True)
    lines[2] = lines[2][:10] + lines[3]
    log.write_bytes(b"".join(lines))
    assert_user_error(invoke("worker", "--storage", "journal:s.log", "--study", "s"), "--storage", "line 3",
                      "not one whole JSON record")


@pytest.mark.parametrize("storage, calibrate", [("sqlite:///t.db", "t.db"), ("sqlite:///t.db", "./sub/../t.db"),
                                                ("journal:t.log", "t.log")])
def test_tune_refuses_a_calibrate_file_that_is_its_study_storage(storage, calibrate, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "sub").mkdir()
    result = invoke("tune", *SMALL, "--run", "true", "--storage", storage, "--calibrate", calibrate, "--force")
    assert_user_error(result, "--calibrate", "--storage file", "calib.yaml")
    assert not (tmp_path / "t.db").exists() and not (tmp_path / "t.log").exists()  # refused before the study


# --- capacity planning -------------------------------------------------------------------------------------

CAPACITY = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "-s", "4096", "-b", "16", "--tokens", "1e9"]


@pytest.mark.parametrize("args, flag", [
    (["--gpus", "8..16", "--storage", "sqlite:///c.db", "--study", "c"], "--storage"),
    (["--gpus", "8", "--deadline", "30d", "--study", "c"], "--study"),
    (["--gpus", "8..16", "--storage", "journal:c.log", "--study", "c", "--new"], "--new"),
    (["--gpus", "8..16", "--heartbeat", "30"], "--heartbeat"),  # typed, though at its default
])
def test_capacity_planning_refuses_study_flags_rather_than_ignore_them(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*CAPACITY, *args), flag, "capacity planning", "leave")
    assert list(tmp_path.iterdir()) == []


# --- MoE imbalance -----------------------------------------------------------------------------------------

MOE = ["predict", "-m", "qwen3-30b-a3b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096", "-b", "64", "--json"]


def _tokens(*args):
    result = invoke(*MOE, *args)
    return predicted(result)["estimate"]["tokens_per_s_per_gpu"], result.stderr  # numbers, fitting or not


def test_moe_imbalance_has_no_effect_with_ep_1_and_says_so():
    even, _ = _tokens("--plan", "ep=1")
    hot, note = _tokens("--plan", "ep=1", "--moe-imbalance", "1.5")
    assert hot == even
    assert "no effect with ep=1" in note


def test_moe_imbalance_is_capped_at_ep_and_says_so():
    at_ep, _ = _tokens("--plan", "ep=2", "--moe-imbalance", "2")
    beyond, note = _tokens("--plan", "ep=2", "--moe-imbalance", "3")
    assert beyond == at_ep
    assert "capped at 2 with ep=2" in note
    below, _ = _tokens("--plan", "ep=2", "--moe-imbalance", "1.5")
    assert below > at_ep


def test_search_says_when_the_imbalance_moved_its_best_plan_to_ep_1():
    args = ["search", "-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096", "-b", "256",
            "--top", "1", "--json"]
    balanced = json.loads(invoke(*args).stdout)["plans"][0]["plan"]
    result = invoke(*args, "--moe-imbalance", "2")
    assert result.exit_code == 0, result.output
    hot = json.loads(result.stdout)["plans"][0]["plan"]
    assert balanced["ep"] > 1 and hot["ep"] == 1  # the imbalance charged every ep > 1 plan, and none with ep=1
    assert "applies to plans with ep > 1 only" in result.stderr and "the best plan has ep=1" in result.stderr


@pytest.mark.parametrize("command", ["explain", "emit"])
def test_a_plans_json_imbalance_beyond_what_routing_can_give_is_refused(command, tmp_path):
    out = tmp_path / "run"
    made = invoke("search", "-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096", "-b", "256",
                  "--top", "1", "--out", str(out))
    assert made.exit_code == 0, made.output
    plans = out / "plans.json"
    document = json.loads(plans.read_text())
    document["inputs"]["moe_imbalance"] = 100  # 8 experts, 2 per token: at most 4 times the mean
    plans.write_text(json.dumps(document))
    extra = ["--format", "megatron", "--out", str(tmp_path / "launch")] if command == "emit" else []
    assert_user_error(invoke(command, str(out), *extra), "inputs.moe_imbalance", "<= 4")


@pytest.mark.parametrize("value, needle", [("17", "1 <= imbalance <= 16 must hold"), ("inf", "finite"),
                                           ("nan", "finite"), ("0.5", ">= 1")])
def test_moe_imbalance_beyond_what_routing_can_give_is_refused(value, needle):
    assert_user_error(invoke(*MOE, "--plan", "ep=16", "--moe-imbalance", value), "--moe-imbalance", needle)


# --- measured memory beyond the GPU ------------------------------------------------------------------------

def _runs_with_memory(tmp_path, value):
    import csv

    rows = list(csv.DictReader((ROOT / "tests" / "data" / "training_runs_small.csv").open(newline="")))
    row = next(r for r in rows if r["gpu"] == "h100-sxm5-80gb")
    row["measured_memory_gib_per_gpu"] = value
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path, row["id"]


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_measured_memory_beyond_the_gpu_refuses_the_file_naming_row_and_column(command, tmp_path):
    runs, rid = _runs_with_memory(tmp_path, "5000")
    out = ["--out", tmp_path / "c.yaml"] if command == "calibrate" else []
    assert_user_error(invoke(command, runs, *out), "runs.csv", f"row {rid!r}", "measured_memory_gib_per_gpu",
                      "<= 87.0 must hold", "5000")
    assert not (tmp_path / "c.yaml").exists()
    runs, _ = _runs_with_memory(tmp_path, "84.5")  # 80 GiB counted in decimal GB: within the margin
    assert invoke("validate", runs, "--json").exit_code == 0


def test_tune_fails_a_trial_whose_peak_memory_is_beyond_the_gpu(tmp_path):
    bench = f"{sys.executable} -c \"print('{{\\\"tokens_per_s_per_gpu\\\": 5000, \\\"peak_memory_gib\\\": 500}}')\""
    result = invoke("tune", *SMALL, "--trials", "1", "--prior-top", "1", "--heartbeat", "0", "--run", bench,
                    "--storage", f"sqlite:///{tmp_path}/t.db", "--json")
    assert result.exit_code == 1, result.output
    trial = json.loads(result.stdout)["trials"][0]
    assert trial["outcome"] == "failed"
    assert "peak_memory_gib <= 87.0 must hold" in trial["failure_reason"]


# --- spaces that cannot give a plan ------------------------------------------------------------------------

def _marker_bench(tmp_path):
    marker = tmp_path / "ran"
    return marker, f"{sys.executable} -c \"open({str(marker)!r}, 'w')\""


@pytest.mark.parametrize("args, needle", [
    (["--fix", "tp=3"], "tp*pp*cp does not divide the GPU count"),
    (["--fix", "pp=2", "--fix", "zero=3"], "ZeRO stage the framework does not offer"),
])
def test_tune_with_no_valid_plan_fails_before_any_trial_with_the_search_diagnosis(args, needle, tmp_path):
    marker, bench = _marker_bench(tmp_path)
    result = invoke("tune", *SMALL, "--run", bench, "--storage", f"sqlite:///{tmp_path}/t.db", "--trials", "3", *args)
    assert result.exit_code == 1, result.output
    assert "no plan fits. What binds: every plan of the space breaks " in result.stderr
    assert needle in result.stderr and "no benchmark was run" in result.stderr
    assert not marker.exists() and not (tmp_path / "t.db").exists()
    search = invoke("search", *SMALL, *args)  # the same words as search
    assert search.exit_code == 1 and result.stderr.splitlines()[0] in search.stderr


@pytest.mark.parametrize("prior", [[], ["--prior-top", "0"]])  # 0: no plan queued first, the check all the same
def test_tune_where_every_plan_is_predicted_not_to_fit_fails_before_any_trial(prior, tmp_path):
    marker, bench = _marker_bench(tmp_path)
    result = invoke("tune", "-m", "llama3-405b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "8192", "-b", "16",
                    "--run", bench, "--storage", f"sqlite:///{tmp_path}/t.db", "--trials", "3", *prior)
    assert result.exit_code == 1, result.output
    assert "What binds: memory" in result.stderr and "--margin" in result.stderr and "--no-prior" in result.stderr
    assert not marker.exists() and not (tmp_path / "t.db").exists()


def test_a_memory_headroom_that_leaves_nothing_is_named_as_what_binds():
    result = invoke("search", *SMALL, "--memory-headroom", "0.99")
    assert result.exit_code == 1, result.output
    assert "What binds: memory headroom" in result.stderr
    assert "--memory-headroom 0.99 leaves" in result.stderr
    assert "a smaller --memory-headroom (0.03, the default): fits" in result.stderr
    assert "but the h100-sxm5-80gb has 80 GiB" not in result.stderr  # what it said: 8.2 GiB needed, 80 GiB had


def test_capacity_planning_says_which_rule_leaves_no_plan():
    base = ["search", "-m", "qwen3-32b", "-H", "h100-sxm5-80gb", "-s", "4096", "-b", "64", "--tokens", "1e9",
            "--fix", "tp=16"]
    one = invoke(*base, "--gpus", "16..32")
    assert one.exit_code == 1, one.output
    assert "KV heads not divisible by tp" in one.stderr and "use tp in [1, 2, 4, 8]" in one.stderr
    assert "out of memory" not in one.stderr
    several = invoke(*base, "--gpus", "8..16", "--json")
    assert several.exit_code == 1
    notes = [c["note"] for c in json.loads(several.stdout)["capacity"]["candidates"]]
    assert notes[0].startswith("no valid plan: tp*pp*cp does not divide the GPU count")
    assert notes[1].startswith("no valid plan: KV heads not divisible by tp")
    assert "every plan breaks a validity rule" in several.stderr


# --- SIGTERM during a measured trial -----------------------------------------------------------------------

TERM_BENCH = """\
import os, signal, subprocess, sys, time
child = subprocess.Popen(["sleep", "120"])  # the benchmark's own helper, in its process group
with open(sys.argv[1], "w") as handle:
    handle.write(str(child.pid))
os.kill(os.getppid(), signal.SIGTERM)  # the tune process is told to stop (a scheduler, `kill`)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not os.path.isdir("/proc") or not hasattr(os, "killpg"), reason="POSIX process groups")
def test_sigterm_stops_the_benchmark_group_and_fails_its_trial_as_ctrl_c_does(tmp_path):
    from autotune.search.optuna_study import load_records

    script, pidfile = tmp_path / "bench.py", tmp_path / "helper.pid"
    script.write_text(TERM_BENCH)
    url = f"sqlite:///{tmp_path}/t.db"
    # without the fix the signal must not end the test run: a handler of our own takes it meanwhile
    def ours(*_):
        return None

    previous = signal.signal(signal.SIGTERM, ours)
    try:
        result = invoke("tune", *SMALL, "--run", f"{sys.executable} {script} {pidfile}", "--storage", url,
                        "--study", "s", "--trials", "2", "--prior-top", "1", "--heartbeat", "0",
                        "--trial-timeout", "30")
        assert signal.getsignal(signal.SIGTERM) is ours  # tune's own handler is gone again
    finally:
        signal.signal(signal.SIGTERM, previous)
    helper = int(pidfile.read_text())
    try:
        deadline = time.monotonic() + 20
        while not _gone(helper) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert _gone(helper), "the benchmark's process group outlived tune"
    finally:
        if not _gone(helper):
            os.kill(helper, signal.SIGKILL)
    assert result.exit_code == 143, result.output
    assert "terminated." in result.stderr and "run the same command to continue" in result.stderr
    trial, again = load_records(url, "s")
    assert trial["state"] == "FAIL" and trial["user_attrs"].get("outcome") is None  # not counted
    assert again["state"] == "WAITING" and again["retry_of"] == trial["number"]  # run again on resume


# --- more trials than plans --------------------------------------------------------------------------------

NARROW = [*SMALL, "--fix", "tp=8", "--fix", "pp=1", "--fix", "cp=1"]


@pytest.mark.parametrize("sampler", ["tpe", "random"])
def test_more_sampler_trials_than_valid_plans_evaluate_every_plan_with_a_note(sampler, tmp_path):
    from autotune.search import valid_plan_count
    from autotune.search.api import SearchSettings, parse_fixes, training_problem
    from autotune.inputs.request import TrainingRequest

    inputs = TrainingRequest(model="llama3-8b", hardware="h100-sxm5-80gb", gpus=8, seq_len=4096,
                             global_batch=16).build()
    valid = valid_plan_count(training_problem(inputs, SearchSettings(fixes=parse_fixes(["tp=8", "pp=1", "cp=1"]))),
                             10**6)
    assert valid is not None and 0 < valid < 100
    result = invoke("search", *NARROW, "--sampler", sampler, "--trials", "100000")
    assert result.exit_code == 0, result.output
    assert (f"--trials 100,000 is more than the {valid:,} valid plans of the space: every valid plan evaluated "
            f"instead of sampling with {sampler}") in " ".join(result.stdout.split())
    # as good as the exact search: a sampler capped at the valid count saw a fraction of them and missed the best
    out = json.loads(invoke("search", *NARROW, "--sampler", sampler, "--trials", "100000", "--json").stdout)
    exact = json.loads(invoke("search", *NARROW, "--sampler", "exact", "--json").stdout)
    assert out["search"]["sampler"] == "exact"
    assert out["plans"][0]["plan"] == exact["plans"][0]["plan"]
    url = f"sqlite:///{tmp_path}/s.db"  # a study's target too
    stored = invoke("search", *NARROW, "--sampler", sampler, "--trials", "100000", "--storage", url, "--study", "s")
    assert stored.exit_code == 0, stored.output
    from autotune.search.optuna_study import load_records

    assert len([r for r in load_records(url, "s") if r["state"] == "COMPLETE"]) <= valid


def test_tune_caps_its_benchmark_runs_at_the_valid_plans(tmp_path):
    bench = f"{sys.executable} -c \"print('{{\\\"tokens_per_s_per_gpu\\\": 5000, \\\"peak_memory_gib\\\": 50}}')\""
    result = invoke("tune", *NARROW, "--fix", "zero=1", "--fix", "mbs=1", "--fix", "offload=none", "--run", bench,
                    "--trials", "50", "--storage", f"sqlite:///{tmp_path}/t.db", "--heartbeat", "0", "--json")
    assert result.exit_code == 0, result.output
    assert "is more than the 3 valid plans of the space: capped at 3" in result.stderr
    assert json.loads(result.stdout)["study"]["runs"] == 3


# --- conflicting flags -------------------------------------------------------------------------------------

@pytest.mark.parametrize("gpus", [["--gpus", "8"], ["--gpus", "8..16", "--tokens", "1e9"]])
def test_a_pinned_precision_outside_precision_is_refused_naming_both(gpus):
    base = ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "-s", "4096", "-b", "16", *gpus]
    assert_user_error(invoke(*base, "--fix", "precision=fp8", "--precision", "bf16"), "--fix precision",
                      "--precision", "must agree", "fp8", "bf16")
    within = invoke(*base, "--fix", "precision=fp8", "--precision", "bf16,fp8", "--json")
    assert within.exit_code == 0, within.output


@pytest.mark.parametrize("command, extra", [("tune", ["--run", "true"]), ("explain", ["--plan", "tp=1"]),
                                            ("emit", ["tp=1", "--format", "megatron"]),
                                            ("predict", ["--plan", "tp=1"])])
@pytest.mark.parametrize("gpus, needle", [("8..16", "takes one GPU count"), ("eight", "must be one GPU count"),
                                          ("16..8", "such as --gpus 8"), ("\u0668", "must be one GPU count"),
                                          ("0", "e.g. --gpus 8")])
def test_a_gpu_range_or_word_where_one_count_is_taken_is_answered_through_the_error_path(command, extra, gpus,
                                                                                         needle, tmp_path,
                                                                                         monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = [command, *extra, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "-s", "4096", "-b", "16", "--gpus", gpus]
    result = invoke(*args)
    assert_user_error(result, "--gpus", needle, *(["whole number"] if gpus != "0" else []))
    if gpus in ("8..16", "16..8"):
        assert "autotune search ... --gpus 8..16" in result.stderr  # the range, ordered, where it belongs
    assert list(tmp_path.iterdir()) == []


# --- smaller things the sweep found ------------------------------------------------------------------------

def test_a_framework_profile_with_a_gradient_of_three_bytes_is_refused(tmp_path):
    text = (ROOT / "profiles" / "frameworks" / "megatron-lm.yaml").read_text()
    assert "\n  grad_bytes: 4\n" in text
    profile = tmp_path / "fw.yaml"
    profile.write_text(text.replace("\n  grad_bytes: 4\n", "\n  grad_bytes: 3\n", 1))
    assert_user_error(invoke("predict", *SMALL, "--plan", "tp=1", "--framework", profile), "fw.yaml",
                      "traits.grad_bytes", "2 (bf16 gradients) or 4 (fp32)", "got 3")


@pytest.mark.parametrize("deadline, fix", [("30", "30d"), ("1.5e1", "1.5e1d"), ("0", "30d")])  # not 0d, refused too
def test_a_deadline_without_a_unit_is_refused_not_read_as_days(deadline, fix):
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8..16", "-s", "4096", "-b", "16",
                    "--tokens", "1e9", "--deadline", deadline)
    assert_user_error(result, "--deadline", "must name its unit", f"e.g. {fix} for days")


@pytest.mark.parametrize("json_flag", [[], ["--json"]])
def test_explain_exits_non_zero_for_a_plan_the_framework_cannot_run(json_flag):
    base = ["explain", *SMALL, *json_flag, "--plan"]
    bad = invoke(*base, "tp=2,pp=2,zero=3")
    assert bad.exit_code == 1, bad.output
    assert "invalid plan: megatron-lm" in bad.stderr and "ZeRO-3 with pipeline parallelism" in bad.stderr
    if json_flag:
        assert json.loads(bad.stdout)["binding"]["kind"] == "rule"  # still explained
    assert invoke(*base, "tp=2,pp=2,zero=1").exit_code == 0
    assert invoke(*base, "tp=2,sp=false").exit_code == 0  # a rule of the search space only: it can run


def test_a_calibration_error_names_its_field_once(tmp_path):
    overlay = tmp_path / "c.yaml"
    overlay.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency:\n      gemm: 5\n")
    result = invoke("predict", *SMALL, "--plan", "tp=1", "--calibration", overlay)
    assert_user_error(result, "field 'hardware.h100-sxm5-80gb.efficiency.gemm'", "must be <= 1")
    assert result.stderr.count("field") == 1 and result.stderr.count("gemm") == 1


def test_tune_says_it_continues_a_study_once_and_a_worker_with_nothing_to_do_says_so(tmp_path):
    bench = f"{sys.executable} -c \"print('{{\\\"tokens_per_s_per_gpu\\\": 5000, \\\"peak_memory_gib\\\": 50}}')\""
    args = ["tune", *SMALL, "--run", bench, "--storage", f"sqlite:///{tmp_path}/t.db", "--study", "t",
            "--prior-top", "2", "--heartbeat", "0"]
    assert invoke(*args, "--trials", "2").exit_code == 0
    again = invoke(*args, "--trials", "3")
    assert again.exit_code == 0, again.output
    assert again.output.count("continuing study 't'") == 1
    worker = invoke("worker", "--storage", f"sqlite:///{tmp_path}/t.db", "--study", "t", "--run", bench,
                    "--trials", "1")
    assert worker.exit_code == 0, worker.output
    assert "already holds 3 trials, at least its target of 1, so there was nothing to do here" in worker.stdout
    assert "holds 3 of 1" not in worker.stdout
