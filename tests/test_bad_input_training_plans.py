"""Training plans.json files and training options a hostile-input sweep found mishandled: an edited plan that
breaks the target framework's rules, empty paths, malformed inputs and plan keys, a version newer than any
profiled, empty model or hardware names, and a negative report seed.

Each case runs as a person would type it, through typer's CliRunner: one line naming the file, field or option,
exit status 2, no traceback."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tests.test_bad_input import SMALL, assert_user_error, invoke, predicted

MIXTRAL = ["-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096", "-b", "64"]


def _search(folder: Path, *args: str) -> dict:
    result = invoke("search", *args, "--out", folder)
    assert result.exit_code == 0, result.output
    return json.loads((folder / "plans.json").read_text())


@pytest.fixture(scope="module")
def mixtral_plans(tmp_path_factory) -> dict:
    return _search(tmp_path_factory.mktemp("mixtral") / "run", *MIXTRAL)


@pytest.fixture(scope="module")
def torchtitan_plans(tmp_path_factory) -> dict:
    return _search(tmp_path_factory.mktemp("torchtitan") / "run", *SMALL, "--framework", "torchtitan")


@pytest.fixture(scope="module")
def small_plans(tmp_path_factory) -> dict:
    return _search(tmp_path_factory.mktemp("small") / "run", *SMALL)


def edited(tmp_path: Path, document: dict, plan: dict | None = None, **inputs) -> Path:
    """A copy of ``document`` with the best plan's keys and the inputs changed (None deletes), in its own folder."""
    doc = json.loads(json.dumps(document))
    for key, value in (plan or {}).items():
        if value is None:
            doc["plans"][0]["plan"].pop(key, None)
        else:
            doc["plans"][0]["plan"][key] = value
    for key, value in inputs.items():
        if value is None:
            doc["inputs"].pop(key, None)
        else:
            doc["inputs"][key] = value
    path = tmp_path / "edited" / "plans.json"
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps(doc))
    return path


# --- 1. an edited plans.json is held to the plan rules of its framework -----------------------------------------

@pytest.mark.parametrize("command", ["emit", "report"])
def test_an_edited_plan_breaking_a_model_rule_is_refused(mixtral_plans, tmp_path, command):
    path = edited(tmp_path, mixtral_plans, {"ep": 3})
    extra = ["--trials", "0"] if command == "report" else []
    result = invoke(command, path, "--out", tmp_path / "out", *extra)
    assert_user_error(result, "plans.json", "plans.plan", "rank 1", "experts not divisible by ep")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("command", ["emit", "report"])
def test_an_edited_plan_breaking_a_framework_rule_is_refused(torchtitan_plans, tmp_path, command):
    path = edited(tmp_path, torchtitan_plans, {"zero": 1})
    extra = ["--format", "torchtitan"] if command == "emit" else ["--trials", "0"]
    result = invoke(command, path, "--out", tmp_path / "out", *extra)
    assert_user_error(result, "plans.json", "plans.plan", "torchtitan", "does not offer ZeRO-1")


def test_an_unedited_plans_json_still_emits(mixtral_plans, tmp_path):
    result = invoke("emit", edited(tmp_path, mixtral_plans), "--out", tmp_path / "out")
    assert result.exit_code == 0, result.output


# --- 2. empty paths on emit ---------------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["--data-path", "--tokenizer"])
@pytest.mark.parametrize("value", ["", "  "])
def test_emit_refuses_an_empty_data_path_or_tokenizer(flag, value):
    result = invoke("emit", "tp=1", *SMALL, flag, value)
    assert_user_error(result, flag, "must name a path", f"leave {flag} out")


def test_serving_emit_refuses_an_empty_model_path():
    result = invoke("emit", "tp=1", "--format", "vllm", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1",
                    "--input-len", "512", "--output-len", "128", "--model-path", "")
    assert_user_error(result, "--model-path", "must name a path")


# --- 3. a malformed inputs block or plan names the field ----------------------------------------------------------

@pytest.mark.parametrize("value", [["bf17"], [], "bf16", [8]])
def test_report_names_bad_precisions(small_plans, tmp_path, value):
    path = edited(tmp_path, small_plans, precisions=value)
    result = invoke("report", path, "--out", tmp_path / "out", "--trials", "0")
    assert_user_error(result, "plans.json", "inputs.precisions", "bf16, fp16, fp8", repr(value))
    assert "tuple.index" not in result.output


@pytest.mark.parametrize("command", ["report", "emit", "explain"])
def test_an_unknown_plan_key_is_named(small_plans, tmp_path, command):
    path = edited(tmp_path, small_plans, {"foo": 3})
    extra = ["--out", tmp_path / "out", "--trials", "0"] if command == "report" else []
    assert_user_error(invoke(command, path, *extra), "plans.json", "plans.plan", "unknown plan key(s) 'foo'",
                      "tp, pp")


@pytest.mark.parametrize("command", ["report", "emit", "explain"])
def test_a_plan_degree_given_as_a_string_is_named(small_plans, tmp_path, command):
    path = edited(tmp_path, small_plans, {"tp": "4"})
    extra = ["--out", tmp_path / "out", "--trials", "0"] if command == "report" else []
    assert_user_error(invoke(command, path, *extra), "plans.json", "plans.plan",
                      "tp must be an integer, but got (tp='4')")


# --- 7. tune: a benchmark result beyond what the GPU can do fails its trial ----------------------------------------

def _bench(result: str) -> str:
    return f"{sys.executable} -c \"print('{result}')\""


@pytest.mark.parametrize("result, field, value", [
    ('{\\"tokens_per_s_per_gpu\\": 5e30, \\"peak_memory_gib\\": 50}', "tokens_per_s_per_gpu", "5e+30"),
    ('{\\"tokens_per_s_per_gpu\\": 5000, \\"peak_memory_gib\\": 1e9}', "peak_memory_gib", "1e+09"),
    # Llama-3-8B's bf16 plans on H100 summed over the 8 GPUs: 3x the bf16 peak (5x fp8's peak had let it pass)
    ('{\\"tokens_per_s_per_gpu\\": 56000, \\"peak_memory_gib\\": 50}', "tokens_per_s_per_gpu", "56000"),
])
def test_tune_fails_the_trials_of_an_implausible_benchmark(tmp_path, result, field, value):
    args = ["tune", *SMALL, "--trials", "2", "--prior-top", "2", "--heartbeat", "0", "--run", _bench(result),
            "--storage", f"sqlite:///{tmp_path}/t.db"]
    ran = invoke(*args)
    assert ran.exit_code == 1, ran.output  # no trial succeeded: the study ran and says why, it did not crash
    assert "Traceback" not in ran.output
    assert "trial 0 failed" in ran.stderr and "trial 1 failed" in ran.stderr
    assert f"implausible result: {field} <=" in ran.stderr and f"({field}={value})" in ran.stderr
    listed = invoke(*args, "--json")  # the study holds them as failed trials, the value kept
    trials = json.loads(listed.stdout)["trials"]
    assert [t["outcome"] for t in trials] == ["failed", "failed"]
    assert all(t["failure_reason"].startswith("implausible result") for t in trials)


def test_tune_keeps_a_plausible_benchmark_result(tmp_path):
    result = '{\\"tokens_per_s_per_gpu\\": 5000, \\"peak_memory_gib\\": 50}'
    ran = invoke("tune", *SMALL, "--trials", "1", "--prior-top", "1", "--heartbeat", "0", "--run", _bench(result),
                 "--storage", f"sqlite:///{tmp_path}/t.db")
    assert ran.exit_code == 0, ran.output
    assert "implausible" not in ran.output


# --- 8. a nested field is named once ------------------------------------------------------------------------------

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("model, old, new, field", [
    ("mixtral-8x7b", "  top_k: 2\n", "  top_k: x\n", "moe.top_k"),
    ("mixtral-8x7b", "  n_experts: 8\n", "  n_experts: -1\n", "moe.n_experts"),
    ("deepseek-v3", "  kv_lora_rank: 512\n", "  kv_lora_rank: 0\n", "mla.kv_lora_rank"),
])
def test_a_field_of_a_spec_section_is_named_once(tmp_path, model, old, new, field):
    text = (ROOT / "profiles" / "models" / f"{model}.yaml").read_text()
    assert old in text
    path = tmp_path / "spec.yaml"
    path.write_text(text.replace(old, new))
    result = invoke("predict", "-m", path, "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", "-p", "tp=1")
    assert_user_error(result, f"spec.yaml: field '{field}': must be")
    line = result.stderr.strip()
    assert line.count("field '") == 1 and line.count("spec.yaml") == 1, line


@pytest.mark.parametrize("column, value, needle", [
    ("framework", "foo", "unknown framework 'foo'"),
    ("framework_version", "abc", "unknown version 'abc' of megatron-lm"),
    ("tied_embeddings", "maybe", "must be true or false, but got 'maybe'"),
])
def test_a_runs_csv_cell_is_named_once_by_its_column(tmp_path, column, value, needle):
    from tests.test_bad_input import TRAINING_CSV, csv_rows, write_csv

    rows = csv_rows(TRAINING_CSV)
    rows[0][column] = value
    header = list(rows[0])
    path = write_csv(tmp_path / "runs.csv", rows, header)
    result = invoke("validate", path)
    assert_user_error(result, f"runs.csv: field '{column}': row {rows[0]['id']!r}: {needle}")
    assert result.stderr.count("field '") == 1 and "--framework" not in result.stderr


# --- 9. a framework version newer than any profiled ---------------------------------------------------------------

PREDICT = ["predict", *SMALL, "-p", "tp=2"]  # a plan that fits, so predict exits 0


def test_a_version_newer_than_any_profiled_runs_with_a_one_line_note():
    result = invoke(*PREDICT, "--framework", "megatron-lm@2099-01")
    assert result.exit_code == 0, result.output
    notes = [line for line in result.stderr.splitlines() if line.startswith("note:")]
    assert len(notes) == 1, result.stderr
    assert "megatron-lm@2099-01 is newer than any version profiled" in notes[0]
    assert "changes profiled from" in notes[0] and "the newest profiled settings are used" in notes[0]
    newest = invoke(*PREDICT, "--framework", "megatron-lm")  # the same settings as the newest profiled
    assert result.stdout.splitlines()[-2:] == newest.stdout.splitlines()[-2:]


def test_a_profiled_version_gets_no_note():
    for spec in ("megatron-lm@2024-07", "nemo@25.11", "nemo@2025-10"):
        result = invoke(*PREDICT, "--framework", spec)
        assert result.exit_code == 0, result.output
        assert "newer than any version" not in result.stderr, spec


@pytest.mark.parametrize("spec, known", [("megatron-lm@2099-13", "no named releases; changes profiled from"),
                                         ("nemo@99.01", "releases 23.10, ")])
def test_an_unknown_version_names_the_known_ones(spec, known):
    assert_user_error(invoke(*PREDICT, "--framework", spec), "field '--framework'", "unknown version", known)


@pytest.mark.parametrize("spec, first", [("megatron-lm@0000-01", "2019-08"), ("deepspeed@1999-12", "2020-02"),
                                         ("torchtitan@2019-07", "2024-04"), ("torchtitan@2020-01", "2024-04"),
                                         ("llm-foundry@2023-04", "2023-05"), ("nemo@2019-08", "2019-09"),
                                         ("megatron-bridge@2020-01", "2025-07")])
def test_a_version_before_the_frameworks_first_release_is_refused(spec, first):
    """A bundled profile states its first release with a source; a date before it is refused, naming it."""
    assert_user_error(invoke(*PREDICT, "--framework", spec), "field '--framework'", "predates its first release",
                      f"from {first} on")


@pytest.mark.parametrize("spec", ["megascale@2019-07", "other@1999-12"])
def test_a_profile_without_a_first_release_is_held_to_the_oldest_framework(spec):
    assert_user_error(invoke(*PREDICT, "--framework", spec), "field '--framework'", "predates every framework",
                      "2019-08")


@pytest.mark.parametrize("spec", ["torchtitan@2024-04", "llm-foundry@2023-05", "deepspeed@2020-02", "nemo@2019-09"])
def test_a_version_from_the_first_release_on_resolves(spec):
    # resolved: a prediction (that data parallelism alone does not fit 8B is the answer, exit 1), not an error
    assert predicted(invoke("predict", *SMALL, "-p", "tp=1,zero=0", "--framework", spec, "--json"))["estimate"]


def test_a_users_first_release_before_the_oldest_framework_is_its_floor(tmp_path):
    """A user's profile that states a first release of 2018-01 resolves 2018-06 and refuses 2017-12."""
    import yaml

    data = yaml.safe_load(Path("profiles/frameworks/megatron-lm.yaml").read_text())
    data["name"], data["first_release"] = "meshtf", {"date": "2018-01", "source": "a user's own release"}
    path = tmp_path / "meshtf.yaml"
    path.write_text(yaml.safe_dump(data))
    plain_ddp = ["predict", *SMALL, "-p", "tp=1,zero=0"]
    assert predicted(invoke(*plain_ddp, "--framework", f"{path}@2018-06", "--json"))["estimate"]  # resolved
    assert_user_error(invoke(*plain_ddp, "--framework", f"{path}@2017-12"), "predates its first release",
                      "from 2018-01 on")


@pytest.mark.parametrize("first_release, field", [
    ("2019", "first_release"),
    ({"date": "2019-13", "source": "x"}, "first_release.date"),
    ({"date": "2019-08"}, "first_release.source"),
    ({"date": "2019-08", "source": "x", "by": "me"}, "first_release.by"),
    ({"date": "2030-01", "source": "a date after its own changes"}, "first_release.date"),
])
def test_a_malformed_first_release_in_a_users_profile_is_refused(first_release, field, tmp_path):
    import yaml

    data = yaml.safe_load(Path("profiles/frameworks/megatron-lm.yaml").read_text())
    data["name"], data["first_release"] = "mine", first_release
    path = tmp_path / "mine.yaml"
    path.write_text(yaml.safe_dump(data))
    result = invoke(*PREDICT, "--framework", str(path))
    assert result.exit_code == 2 and "Traceback" not in result.output, result.output
    assert field in result.output


def test_a_users_profile_with_older_dates_is_held_to_its_own(tmp_path):
    """A user's profile that records a change of 2018-06 resolves a 2018 date; a date before it is refused."""
    import yaml

    data = yaml.safe_load(Path("profiles/frameworks/megatron-lm.yaml").read_text())
    data["name"] = "meshtf"
    data.pop("first_release")  # a user's profile that states none
    data["changes"] = [{"since": "2018-06", "traits": {"dropout": True}, "source": "a user's profile"},
                       *data.get("changes", [])]
    path = tmp_path / "meshtf.yaml"
    path.write_text(yaml.safe_dump(data))
    plain_ddp = ["predict", *SMALL, "-p", "tp=1,zero=0"]  # Megatron-LM's base traits (2021) have no ZeRO
    assert predicted(invoke(*plain_ddp, "--framework", f"{path}@2018-08", "--json"))["estimate"]  # resolved
    assert_user_error(invoke(*plain_ddp, "--framework", f"{path}@2018-05"), "field '--framework'",
                      "predates every framework")


# --- 10. an empty model, hardware or space name ------------------------------------------------------------------

@pytest.mark.parametrize("args, flag", [
    (["search", "-m", "", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"], "--model"),
    (["search", "-m", "llama3-8b", "-H", "", "--gpus", "8", "-s", "4096", "-b", "16"], "--hardware"),
    (["search", "-m", " ", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"], "--model"),
    (["predict", "-m", "", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", "-p", "tp=1"], "--model"),
    (["emit", "tp=1", "-m", "llama3-8b", "-H", "", "--gpus", "8", "-s", "4096", "-b", "16"], "--hardware"),
    (["search", "--workload", "serve", "-m", "", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "512",
      "--output-len", "128"], "--model"),
    (["search", *SMALL, "--space", ""], "--space"),
])
def test_an_empty_name_is_refused_naming_the_option(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "config.json").write_text("{}")  # '' is the working folder: it must not read what lies there
    result = invoke(*args)
    assert_user_error(result, f"field '{flag}'", "must not be empty")
    assert "is a folder" not in result.output


# --- 11. report --seed ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("seed", ["-3", "-1"])
def test_report_names_a_negative_seed(small_plans, tmp_path, seed):
    path = edited(tmp_path, small_plans)
    result = invoke("report", path, "--out", tmp_path / "out", "--trials", "0", "--seed", seed)
    assert_user_error(result, "field '--seed'", f"must be between 0 and {2**31 - 1}, but got {seed}")
    assert not (tmp_path / "out").exists()
