"""Command-line edges a hostile-input sweep found mishandled: empty study flags read as left out, a sampled search
that missed the fitting plans blamed on memory, and other values accepted without a word."""

from __future__ import annotations

import json
import re

import pytest

from tests.test_bad_input import SERVE, SMALL, assert_user_error, invoke


# --- a sampled search that found no fitting plan is not a memory problem ---------------------------------

def test_a_sampled_search_that_misses_the_fitting_plans_says_to_sample_more(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("search", *SMALL, "--sampler", "tpe", "--trials", "3", "--json")
    assert result.exit_code == 1, result.output
    diagnosis = json.loads(result.stdout)["diagnosis"]
    assert "tpe sampler tried only 3 plans" in diagnosis["binding"]
    assert "memory" not in diagnosis["binding"]
    assert any("--trials" in fix for fix in diagnosis["fixes"])
    assert any("--sampler exact" in fix for fix in diagnosis["fixes"])


# --- an empty --storage or --study (an unset shell variable) is not the flag left out -------------------

@pytest.mark.parametrize("args, flag", [
    (["search", *SMALL, "--storage", ""], "--storage"),
    (["search", *SMALL, "--sampler", "tpe", "--trials", "3", "--storage", " "], "--storage"),
    (["search", *SMALL, "--study", ""], "--study"),
    (["tune", *SMALL, "--run", "true", "--study", ""], "--study"),
    (["tune", *SMALL, "--run", "true", "--storage", ""], "--storage"),
    (["worker", "--storage", "sqlite:///w.db", "--study", ""], "--study"),
    (["worker", "--storage", "", "--study", "s"], "--storage"),
    (["report", "--storage", "", "--study", "s"], "--storage"),
    (["report", "--storage", "sqlite:///w.db", "--study", ""], "--study"),
])
def test_empty_storage_or_study_is_refused(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), flag, "must not be empty")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("top", ["0", "-1"])
def test_tune_top_below_one_is_refused(top, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("tune", *SMALL, "--run", "true", "--top", top), "--top")
    assert list(tmp_path.iterdir()) == []


# --- values that were read as something else -------------------------------------------------------------

@pytest.mark.parametrize("checkpoint", ["compressed-tensors:", "modelopt:", "MODELOPT: "])
def test_a_container_checkpoint_with_an_empty_scheme_is_refused(checkpoint):
    assert_user_error(invoke("search", *SERVE, "--checkpoint", checkpoint), "--checkpoint", "after the colon")


def test_the_bare_container_still_means_its_common_scheme():
    result = invoke("search", *SERVE, "--checkpoint", "compressed-tensors", "-k", "1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["inputs"]["checkpoint"] == "compressed-tensors:fp8"


def test_validate_worst_below_zero_is_refused():
    assert_user_error(invoke("validate", "--bundled", "training", "--worst", "-1"), "--worst")


# --- a training search space whose choices hold ',' or '=' ----------------------------------------------

def _space_with(tmp_path, **changes):
    import yaml

    from tests.test_bad_input import ROOT

    space = yaml.safe_load((ROOT / "search_spaces" / "train.yaml").read_text())
    for key, value in changes.items():
        if key == "rules":
            space["rules"] = value
        else:
            space["axes"][key] = value
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(space))
    return path


@pytest.mark.parametrize("key, value", [("tp", ["8,pp=2"]), ("recompute", ["full,tp=2"]), ("mbs", ["2,"]),
                                        ("tp", ["1,2"]), ("tp", ["8=8"])])
def test_a_space_choice_holding_other_keys_is_refused_not_a_crash(key, value, tmp_path):
    """'8,pp=2' was read as two plan keys and crashed with a KeyError."""
    path = _space_with(tmp_path, **{key: value})
    for command in (["search", *SMALL, "--space", path], ["tune", *SMALL, "--run", "true", "--space", path]):
        assert_user_error(invoke(*command), "space.yaml", f"axes.{key}", "one value")


def test_space_rules_that_are_a_list_are_refused(tmp_path):
    assert_user_error(invoke("search", *SMALL, "--space", _space_with(tmp_path, rules=[])), "space.yaml", "rules")


# --- a model spec or hardware profile without a name -----------------------------------------------------

@pytest.mark.parametrize("name", ['""', "'  '"])
def test_a_blank_model_or_hardware_name_is_refused(name, tmp_path):
    """A blank name printed '  on 8 x h100-sxm5-80gb' and was recorded so in plans.json."""
    from tests.test_bad_input import PROFILE, SPEC

    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.replace("name: llama3-8b", f"name: {name}"))
    profile = tmp_path / "gpu.yaml"
    profile.write_text(PROFILE.replace("name: h100-sxm5-80gb", f"name: {name}"))
    assert_user_error(invoke("models", "show", spec), "spec.yaml", "'name'", "must not be empty")
    assert_user_error(invoke("predict", *SMALL[:2], "-H", profile, *SMALL[4:], "-p", "tp=1"), "gpu.yaml", "'name'")
    assert_user_error(invoke("search", "-m", spec, *SMALL[2:], "--out", tmp_path / "o"), "spec.yaml", "'name'")
    assert not (tmp_path / "o").exists()


@pytest.mark.parametrize("key, value", [("source", [1]), ("fit", [1]), ("fit", "good")])
def test_a_serving_calibration_with_notes_of_the_wrong_kind_is_refused(key, value, tmp_path):
    import yaml

    path = tmp_path / "serving.yaml"
    path.write_text(yaml.safe_dump({"schema": "serving", "engines": {"vllm": {"gemm": 0.6}}, key: value}))
    assert_user_error(invoke("search", *SERVE, "--calibration", path), "serving.yaml", f"'{key}'")
    assert_user_error(invoke("validate", "--bundled", "serving", "--calibration", path), "serving.yaml", f"'{key}'")


# --- an empty item in a comma list, an empty --out, a named pipe given as a file -------------------------

@pytest.mark.parametrize("args, flag", [
    (["search", *SMALL, "--objective", "throughput,,cost"], "--objective"),
    (["search", *SMALL, "--objective", "throughput,"], "--objective"),
    (["search", *SMALL, "--precision", "bf16,,fp8"], "--precision"),
    (["search", *SMALL, "--emit", "megatron,,slurm"], "--emit"),
    (["search", *SERVE, "--emit", "vllm,"], "--emit"),
    (["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb,,a100-sxm4-80gb", "--gpus", "8..16", "-s", "4096", "-b", "16",
      "--tokens", "1e9", "--deadline", "30d"], "--hardware"),
    (["predict", *SMALL, "--plan", "tp=2,,pp=1"], "--plan"),
    (["predict", *SERVE, "--plan", "tp=2,,replicas=4"], "--plan"),
])
def test_an_empty_item_in_a_comma_list_is_refused_not_dropped(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), flag, "without empty items")
    assert list(tmp_path.iterdir()) == []


def test_the_same_lists_without_the_extra_comma_still_run(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("search", *SMALL, "--objective", "throughput,cost", "--precision", "bf16,fp8", "-k", "1", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plans"]


@pytest.mark.parametrize("args, flag", [
    (["search", *SMALL, "--out", ""], "--out"),
    (["search", *SMALL, "--out", "  "], "--out"),
    (["report", "plans.json", "--out", ""], "--out"),
    (["emit", "plans.json", "--out", ""], "--out"),
    (["calibrate", "runs.csv", "--out", ""], "--out"),
    (["explain", ""], "plans"),
    (["report", ""], "result"),
    (["validate", ""], "runs_csv"),
    (["emit", ""], "PLAN"),
])
def test_an_empty_path_is_refused_not_read_as_the_current_folder(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "plans.json").write_text("{}")  # '' is the working folder: it must not read what lies there
    assert_user_error(invoke(*args), f"field '{flag}'", "empty one")
    assert [p.name for p in tmp_path.iterdir()] == ["plans.json"]


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("name, args", [
    ("p.csv", ["validate", "p.csv"]),
    ("p.csv", ["calibrate", "p.csv", "--out", "o.yaml"]),
    ("p.yaml", ["search", "-m", "p.yaml", *SMALL[2:]]),
    ("p.yaml", ["search", *SMALL, "--space", "p.yaml"]),
    ("p.yaml", ["search", *SMALL, "--calibration", "p.yaml"]),
    ("p.json", ["explain", "p.json"]),
])
def test_a_named_pipe_given_as_a_file_is_refused_not_waited_on(name, args, tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    os.mkfifo(name)
    assert_user_error(invoke(*args), name, "not a regular file")


def test_a_plans_json_entry_is_chosen_by_its_rank_not_its_position(tmp_path, monkeypatch):
    """explain and emit read the plan a search ranked N, even where the entries were reordered or pruned by hand;
    ranks that repeat are refused."""
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SMALL, "-k", "3", "--out", "r").exit_code == 0
    document = json.loads((tmp_path / "r" / "plans.json").read_text())
    second = document["plans"][1]["plan"]
    document["plans"] = document["plans"][::-1][:2]  # ranks 3 and 2 left, in that order
    (tmp_path / "edited.json").write_text(json.dumps(document))
    result = invoke("explain", "edited.json", "--rank", "2", "--json")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plan"] == second
    assert_user_error(invoke("explain", "edited.json", "--rank", "1"), "--rank", "ranks 2, 3")
    document["plans"][0]["rank"] = 2
    (tmp_path / "twice.json").write_text(json.dumps(document))
    assert_user_error(invoke("emit", "twice.json", "--rank", "2"), "a rank given twice")


def test_latency_targets_no_plan_meets_exit_one_and_still_show_the_closest(tmp_path, monkeypatch):
    """An impossible target (TPOT of 10 microseconds, the least one may state) is a constraint nothing meets: the closest plans are shown and
    written, and the exit status says the targets were missed; targets a plan meets exit 0."""
    monkeypatch.chdir(tmp_path)
    result = invoke("search", *SERVE, "--tpot-ms", "0.01", "-k", "2", "--out", "r")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "no plan meets the targets" in result.stderr and "TPOT" in result.stderr
    assert "Best:" in result.stdout and (tmp_path / "r" / "plans.json").is_file()
    as_json = invoke("search", *SERVE, "--tpot-ms", "0.01", "-k", "2", "--json")
    assert as_json.exit_code == 1
    assert not json.loads(as_json.stdout)["plans"][0]["estimate"]["meets_targets"]
    assert invoke("search", *SERVE, "--tpot-ms", "1000", "-k", "2").exit_code == 0


@pytest.mark.skipif(not __import__("os").path.isdir("/dev/fd"), reason="pipes by descriptor need /dev/fd")
def test_a_pipe_given_by_descriptor_is_read_as_a_yaml_file_but_not_as_a_csv():
    """bash's <(...) and /dev/stdin hand over a pipe with a writer: a YAML input reads it; a CSV of runs, read more
    than once, is refused with the reason instead of reading as empty."""
    import os

    from tests.test_bad_input import ROOT

    def pipe_of(text: str) -> str:
        read_end, write_end = os.pipe()
        os.write(write_end, text.encode())
        os.close(write_end)
        return f"/dev/fd/{read_end}"

    profile = (ROOT / "profiles" / "frameworks" / "nemo.yaml").read_text()
    result = invoke("search", *SMALL, "--framework", pipe_of(profile), "-k", "1", "--json")
    assert result.exit_code == 0, result.output
    runs = (ROOT / "autotune" / "data" / "training_runs.csv").read_text()[:4000]
    assert_user_error(invoke("validate", pipe_of(runs)), "is a pipe", "save it to a file")


@pytest.mark.parametrize("serve", [False, True])
def test_the_report_calls_rank_one_the_best_plan_wherever_it_stands(serve, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    args = (["search", *SERVE, "--tpot-ms", "1000"] if serve else ["search", *SMALL]) + ["-k", "3", "--out", "r"]
    assert invoke(*args).exit_code == 0
    document = json.loads((tmp_path / "r" / "plans.json").read_text())
    document["plans"] = document["plans"][::-1]
    (tmp_path / "reversed.json").write_text(json.dumps(document))
    for source, out in (("r", "a"), ("reversed.json", "b")):
        result = invoke("report", source, "--out", out)
        assert result.exit_code == 0, result.output
    best = [line for line in (tmp_path / "a" / "report.html").read_text().splitlines() if "Best plan" in line]
    assert best and best == [line for line in (tmp_path / "b" / "report.html").read_text().splitlines()
                             if "Best plan" in line]


# --- a study storage that is not one: pipes, devices, a user's other files, a worker's missing file ---------

def test_a_worker_does_not_turn_an_empty_or_missing_file_into_a_database(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "e.log").write_text("")
    assert_user_error(invoke("worker", "--storage", "sqlite:///e.log", "--study", "x"), "--storage", "is empty")
    assert (tmp_path / "e.log").read_bytes() == b""
    assert_user_error(invoke("worker", "--storage", "sqlite:///new.db", "--study", "x"), "--storage", "no such file")
    assert not (tmp_path / "new.db").exists()


@pytest.mark.parametrize("url", ["sqlite:///notes.txt", "journal:notes.txt"])
def test_a_users_other_file_is_not_opened_as_a_study_storage(url, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notes.txt").write_text("my notes\n")
    result = invoke("search", *SMALL, "--storage", url, "--study", "s", "--sampler", "tpe", "--trials", "3")
    assert_user_error(result, "--storage", "opening it would change it")
    assert (tmp_path / "notes.txt").read_text() == "my notes\n"


@pytest.mark.skipif(not hasattr(__import__("os"), "mkfifo"), reason="named pipes are POSIX")
@pytest.mark.parametrize("args", [
    ["worker", "--storage", "journal:p.log", "--study", "x"],
    ["search", *SMALL, "--storage", "journal:p.log", "--study", "x", "--sampler", "tpe", "--trials", "3"],
    ["worker", "--storage", "journal:/dev/zero", "--study", "x"],
])
def test_a_journal_on_a_pipe_or_device_is_refused_not_read_forever(args, tmp_path, monkeypatch):
    import os

    monkeypatch.chdir(tmp_path)
    os.mkfifo("p.log")
    assert_user_error(invoke(*args), "not a regular file")


@pytest.mark.parametrize("args, flag", [
    (["search", "-m", "llama3-8b", "-m", "llama3-70b", *SMALL[2:]], "--model"),
    (["search", *SMALL, "--gpus", "16"], "--gpus"),
    (["search", *SMALL, "--top=3", "--top", "4"], "--top"),
    (["search", *SERVE, "--engine", "vllm", "--engine", "sglang"], "--engine"),
    (["search", *SMALL, "-k3", "-k", "4"], "--top"),  # a short option's value attached, as Click reads it
    (["search", *SMALL, "-k", "3", "-k4"], "--top"),
])
def test_an_option_of_one_value_given_twice_is_refused_not_last_wins(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), f"field '{flag}'", "given once")


def test_a_repeatable_option_a_flag_or_the_same_value_may_repeat(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("search", *SMALL, "--fix", "tp=2", "--fix", "pp=1", "-k", "1", "--top", "1", "-k1", "--json",
                    "--json")
    assert result.exit_code == 0, result.output


# --- round-5 sweep: values read as something else ---------------------------------------------------------------

def test_a_disagg_search_refuses_a_layout_key_shared_by_both_pools(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("search", *SERVE, "--fix", "mode=disagg", "--fix", "tp=2"), "--fix", "prefill_tp")


def test_serving_emit_refuses_zero_gpus_per_node():
    assert_user_error(invoke("emit", "tp=4,weights=fp8", "--format", "sglang", "-m", "llama3-70b", "-H",
                             "h100-sxm5-80gb", "--gpus", "8", "--input-len", "100", "--output-len", "100",
                             "--gpus-per-node", "0"), "--gpus-per-node")


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["plans"][0].update(plan={}), "plans.plan"),
    (lambda d: d["plans"][0].update(rank=0), "plans"),
    (lambda d: d["search"].update(evaluations=-5), "search.evaluations"),
])
def test_a_hand_edited_plans_json_is_refused_where_it_is_read(edit, field, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SMALL, "-k", "3", "--out", "r").exit_code == 0
    document = json.loads((tmp_path / "r" / "plans.json").read_text())
    edit(document)
    (tmp_path / "e.json").write_text(json.dumps(document))
    readers = [["report", "e.json", "--out", "rep"]]  # the search counts are what a report quotes
    if not field.startswith("search"):
        readers += [["explain", "e.json"], ["emit", "e.json"]]
    for args in readers:
        assert_user_error(invoke(*args), field)


def test_an_edited_price_in_a_plans_json_is_the_price_explain_uses(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SMALL, "-k", "1", "--out", "r").exit_code == 0
    document = json.loads((tmp_path / "r" / "plans.json").read_text())
    before = json.loads(invoke("explain", "r", "--json").stdout)
    document["inputs"]["price_usd_per_gpu_hour"] *= 10
    (tmp_path / "e.json").write_text(json.dumps(document))
    after = json.loads(invoke("explain", "e.json", "--json").stdout)
    key = "cost_usd_per_million_tokens"
    assert after["estimate"][key] == pytest.approx(10 * before["estimate"][key])


def test_a_serving_plans_json_whose_mode_contradicts_its_load_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SERVE, "-k", "2", "--out", "s").exit_code == 0
    document = json.loads((tmp_path / "s" / "plans.json").read_text())
    document["inputs"]["mode"] = "min-latency"
    (tmp_path / "e.json").write_text(json.dumps(document))
    assert_user_error(invoke("explain", "e.json"), "inputs.mode")


@pytest.mark.parametrize("edit, field", [
    (lambda d: d.update(name=""), "name"),
    (lambda d: d["traits"].update(zero_stages=[]), "traits.zero_stages"),
    (lambda d: d.update(changes=[*d["changes"], dict(d["changes"][-1])]), "changes"),
])
def test_a_users_framework_profile_that_says_nothing_sensible_is_refused(edit, field, tmp_path):
    import yaml

    from tests.test_bad_input import ROOT

    data = yaml.safe_load((ROOT / "profiles" / "frameworks" / "torchtitan.yaml").read_text())
    edit(data)
    (tmp_path / "mine.yaml").write_text(yaml.safe_dump(data))
    assert_user_error(invoke("predict", *SMALL, "-p", "tp=1", "--framework", str(tmp_path / "mine.yaml")), field)


def test_an_sqlite_url_is_checked_at_the_file_sqlalchemy_opens(tmp_path, monkeypatch):
    """%20 in an SQLite URL is a space, and a file: URI names its file before the query: a worker finds the study
    file the search wrote under either spelling."""
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SMALL, "--storage", "sqlite:///my%20q.db", "--study", "s", "--sampler", "tpe",
                  "--trials", "3").exit_code in (0, 1)
    assert (tmp_path / "my q.db").is_file()
    for url in ("sqlite:///my%20q.db", "sqlite:///file:my%20q.db?mode=ro&uri=true"):
        result = invoke("worker", "--storage", url, "--study", "nope")
        assert_user_error(result, "--study", "no autotune study 'nope'")


def test_a_folder_given_as_a_study_storage_is_named_as_one(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "d").mkdir()
    assert_user_error(invoke("worker", "--storage", "journal:d", "--study", "x"), "--storage", "is a folder")


@pytest.mark.parametrize("key, value", [("hardware", "a100-sxm4-40gb"), ("model", "llama3-70b")])
def test_a_plans_json_name_that_contradicts_what_it_embeds_is_refused(key, value, tmp_path, monkeypatch):
    """The plans were estimated for the embedded spec and profile: an edited name would be ignored, so it is
    refused rather than read as if it planned another model or GPU."""
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SMALL, "-k", "1", "--out", "r").exit_code == 0
    document = json.loads((tmp_path / "r" / "plans.json").read_text())
    document["inputs"][key] = value
    (tmp_path / "e.json").write_text(json.dumps(document))
    for args in (["explain", "e.json"], ["emit", "e.json"], ["report", "e.json", "--out", "rep"]):
        assert_user_error(invoke(*args), f"inputs.{key}", "rerun the search")


# --- numbers at the extremes of a sane input ---------------------------------------------------------------------

@pytest.mark.parametrize("value, fmt, text", [
    (3.3222e31, ",.3f", "3.32e+31"),  # a cost per million tokens at a request rate of 1e-30/s
    (2e-28, ",.0f", "2e-28"),  # tokens/s at that rate: not "0"
    (1234.5678, ",.3f", "1,234.568"),  # everything in between as before
    (0.0, ",.0f", "0"),
    (999_999_999_999.0, ",.0f", "999,999,999,999"),
])
def test_number_text_keeps_tiny_and_huge_values_readable(value, fmt, text):
    from autotune.outputs.tables import number_text

    assert number_text(value, fmt) == text


def _predict_at(rate: str) -> str:
    result = invoke("predict", "-p", "tp=8", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                    "--gpus", "8", "--input-len", "1000", "--output-len", "200", "--request-rate", rate)
    assert result.exit_code == 0, result.output
    return " ".join(result.output.split())


def test_predict_at_the_slowest_request_rate_prints_a_readable_cost_and_batch():
    text = _predict_at("0.001")
    # 0.001 requests/s x 200 tokens; the batch is the rate times a request's 2.4 s (not the solver's resolution);
    # $23.92 an hour over 720 tokens an hour
    assert "0.2 output tokens/s" in text
    assert re.search(r"batch 0\.0024\d per replica", text)  # the digit after moves with the fitted parameters
    assert "$33,222.222 per million output tokens" in text


@pytest.mark.parametrize("rate", ["1e-8", "1e-30", "0.0009"])
def test_a_request_rate_below_one_in_17_minutes_is_refused_as_a_unit_slip(rate):
    """1e-8 requests/s was planned (one request in three years, $3.3 billion per million tokens); the measured-runs
    CSV already refused a rate under 0.001/s, so the flag now agrees with it."""
    result = invoke("predict", "-p", "tp=8", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                    "--gpus", "8", "--input-len", "1000", "--output-len", "200", "--request-rate", rate)
    assert_user_error(result, "--request-rate", "at least 0.001", "per second")


@pytest.mark.parametrize("command", [
    ["search", *SMALL, "--out", "plans.json"],
    ["emit", "tp=8", "--format", "vllm", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len",
     "100", "--output-len", "100", "--out", "serve.sh"],
])
def test_an_out_folder_named_like_a_file_is_refused_not_created(command, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*command), "is a file name", "--out")
    assert not any(tmp_path.iterdir())


def test_a_report_out_named_like_a_file_is_refused(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert invoke("search", *SMALL, "--out", "run").exit_code == 0
    assert_user_error(invoke("report", "run", "--out", "report.html", "--trials", "0"), "--out report")
    assert not (tmp_path / "report.html").exists()
    # a folder that exists keeps working, whatever its name
    (tmp_path / "v1.json").mkdir()
    assert invoke("report", "run", "--out", "v1.json", "--trials", "0").exit_code == 0


@pytest.mark.parametrize("name", [".json", "launch.sbatch"])
def test_an_out_folder_named_only_a_suffix_or_sbatch_is_refused(name, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke("search", *SMALL, "--out", name), "is a file name", "--out")
    assert not any(tmp_path.iterdir())
