"""Round 14 of the hostile-input sweep: profile sections of the wrong type, near-zero links, control characters in
names and a negative zero price."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error, invoke

ROOT = Path(__file__).resolve().parent.parent
H100 = yaml.safe_load((ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text())
TRAIN = ["--gpus", "8", "-s", "4096", "-b", "64"]
SERVE = ["--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "1024",
         "--output-len", "128"]


def _profile(tmp_path: Path, **changes) -> Path:
    profile = {**H100, "name": "my-gpu", **changes}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(profile))
    return path


@pytest.mark.parametrize("section", ["efficiency", "reference_efficiency"])
@pytest.mark.parametrize("value", [0, [], "", False])
def test_a_profile_section_that_is_not_a_mapping_is_refused(tmp_path, section, value):
    """`efficiency: 0` (or [], '', false) was read as no section: the profile was planned at the default
    efficiencies (12,798 tokens/s/GPU where the H100's own give 9,718) without a word."""
    result = invoke("search", "-m", "llama3-8b", *TRAIN, "-H", _profile(tmp_path, **{section: value}), "--top", "1")
    assert_user_error(result, "gpu.yaml", f"field '{section}'", "must")


def test_a_profile_section_left_empty_still_means_the_defaults(tmp_path):
    """YAML `efficiency:` with nothing under it is null: no section, as before."""
    result = invoke("search", "-m", "llama3-8b", *TRAIN, "-H", _profile(tmp_path, efficiency=None, reference_efficiency=None), "--top", "1")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("field, change", [
    ("intra_node.bandwidth_gb_per_s", {"intra_node": {"bandwidth_gb_per_s": 1e-300, "latency_us": 3.4}}),
    ("inter_node.bandwidth_gb_per_s", {"inter_node": {"bandwidth_gb_per_s": 0.05, "latency_us": 14.0}}),
    ("host_link_bandwidth_gb_per_s", {"host_link_bandwidth_gb_per_s": 1e-300}),
    ("cpu_optimizer_params_per_s", {"cpu_optimizer_params_per_s": 1.2}),  # billions given as a count
])
def test_a_link_or_host_rate_near_zero_is_refused(tmp_path, field, change):
    """An intra-node bandwidth of 1e-300 GB/s planned a step of about 10^300 s, printed with 300 digits; the host's
    links and optimizer rate had no floor either."""
    path = _profile(tmp_path, **change)
    for command in (["search", "-m", "llama3-8b", *TRAIN, "-H", path, "--top", "1"],
                    ["predict", "-m", "llama3-8b", *TRAIN, "-H", path, "-p", "tp=2,offload=cpu,zero=1"]):
        assert_user_error(invoke(*command), "gpu.yaml", f"field '{field}'", "must be >=")


def test_the_slowest_plausible_links_are_still_planned(tmp_path):
    """1 Gb/s Ethernet between the nodes (0.125 GB/s) is slow but real: planned, not refused."""
    path = _profile(tmp_path, inter_node={"bandwidth_gb_per_s": 0.125, "latency_us": 50.0})
    result = invoke("search", "-m", "llama3-8b", "--gpus", "16", "-s", "4096", "-b", "64", "-H", path, "--top", "1")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("name", ["x\x1b[31mred", "two\nlines", "tab\there", "nul\x00", "c1\x9b2J"])
def test_a_model_or_hardware_name_with_a_control_character_is_refused(tmp_path, name):
    """A spec's name went to the terminal as it stood: an escape sequence recoloured (or cleared) it and a line
    break split the plan's header; the same held for a profile's name."""
    spec = yaml.safe_load((ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text())
    spec["name"] = name
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert_user_error(invoke("search", *TRAIN, "-m", path, "-H", "h100-sxm5-80gb", "--top", "1"),
                      "spec.yaml", "field 'name'", "control character")
    assert_user_error(invoke("models", "show", path), "field 'name'", "control character")
    profile = _profile(tmp_path, name=name)
    assert_user_error(invoke("hardware", "show", profile), "gpu.yaml", "field 'name'", "control character")


def test_an_hf_config_whose_name_holds_a_control_character_names_where_it_came_from(tmp_path):
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "Meta-Llama-3-8B" / "config.json").read_text())
    config["_name_or_path"] = "org/x\x1b[2Jy"
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert_user_error(invoke("models", "show", tmp_path / "config.json"), "field '_name_or_path'", "control character",
                      "fix _name_or_path")
    folder = tmp_path / "a\tb"  # no _name_or_path: the name is the folder's
    folder.mkdir()
    del config["_name_or_path"]
    (folder / "config.json").write_text(json.dumps(config))
    assert_user_error(invoke("models", "show", folder / "config.json"), "control character", "rename the folder")


@pytest.mark.parametrize("name", ["ünï cödé", "$(touch PWNED)", "a" * 300])
def test_odd_but_printable_names_are_still_read(tmp_path, name):
    spec = yaml.safe_load((ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text())
    spec["name"] = name
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    result = invoke("models", "show", path)
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("command", [
    ["predict", *SERVE, "-p", "tp=1"],
    ["search", *SERVE, "--top", "1"],
])
def test_a_price_of_negative_zero_is_printed_as_zero(command):
    """`--price -0` passed the 0 <= price check and printed "$-0 per GPU-hour" and "$-0.00 per hour"."""
    result = invoke(*command, "--price", "-0")
    assert result.exit_code == 0, result.output
    assert "$-0" not in result.output and "at $0 per GPU-hour" in result.output


@pytest.mark.parametrize("command", [
    ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", *TRAIN, "--top", "1"],
    ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8..64", "-s", "4096", "-b", "64", "--top", "1"],
    ["predict", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", *TRAIN, "-p", "tp=2"],
    ["emit", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", *TRAIN, "-p", "tp=2", "-f", "megatron"],
])
def test_a_training_budget_beyond_any_run_is_refused(command):
    """--tokens 1e18 (an exponent slip for 1e12) printed a run of 148,868,081 days and $85 billion as a plan."""
    assert_user_error(invoke(*command, "--tokens", "1e18"), "field '--tokens'", "must be <= 1e+15", "but got 1e+18")


def test_the_largest_plausible_training_budget_is_still_planned():
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", *TRAIN, "--tokens", "1e15", "--top", "1")
    assert result.exit_code == 0, result.output
    assert "Training the budget takes" in result.output


def _latency_rows(tmp_path: Path, column: str, value: str) -> Path:
    """Three bundled serving-runs rows measured at a request rate, with their TTFT and ITL; the first edited."""
    import csv

    rows = list(csv.DictReader((ROOT / "autotune" / "data" / "serving_runs.csv").open()))
    rows = [r for r in rows if r["id"] in ("TRT014ON-001", "TRT014ON-002", "TRT014ON-003")]
    assert len(rows) == 3 and all(r["ttft_ms_mean"] and r["itl_ms_mean"] for r in rows)
    rows[0][column] = value
    path = tmp_path / "runs.csv"
    with path.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.mark.parametrize("column", ["ttft_ms_mean", "itl_ms_mean"])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_measured_latency_of_zero_is_refused_not_dropped(tmp_path, column, command):
    """A TTFT or ITL of 0 ms was read as an empty cell: the row's latency went uncompared (and unfitted) without a
    word, where -5 was refused."""
    path = _latency_rows(tmp_path, column, "0")
    extra = ["--out", tmp_path / "calib.yaml"] if command == "calibrate" else []
    assert_user_error(invoke(command, path, *extra), "runs.csv", f"field '{column}'", "row 'TRT014ON-001'",
                      "at least 0.001")


def test_measured_latencies_are_still_compared(tmp_path):
    result = invoke("validate", _latency_rows(tmp_path, "ttft_ms_median", ""), "--json")
    assert result.exit_code == 0, result.output
    row = next(r for r in json.loads(result.stdout)["rows"] if r["id"] == "TRT014ON-001")
    assert (row["measured_ttft_ms"], row["measured_itl_ms"]) == (62.0, 21.0)  # the CSV's cells
    assert row["ttft_error_pct"] is not None and row["itl_error_pct"] is not None


def test_a_spec_with_more_mtp_modules_than_layers_is_refused(tmp_path):
    """mtp_layers: 1000000000 was read: serving plans ignored it and a training search answered that the leanest
    plan needs 206,720,885.5 GiB per GPU."""
    spec = yaml.safe_load((ROOT / "profiles" / "models" / "deepseek-v3.yaml").read_text())
    spec["mtp_layers"] = 1_000_000_000
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    for command in (["models", "show", path],
                    ["search", "--workload", "serve", "-m", path, "-H", "b200", "--gpus", "8", "--input-len", "1024",
                     "--output-len", "128", "--top", "1"]):
        assert_user_error(invoke(*command), "spec.yaml", "mtp_layers <= n_layers", "mtp_layers=1000000000")


@pytest.mark.parametrize("key", ["num_nextn_predict_layers", "num_mtp_modules"])
def test_an_hf_config_with_more_mtp_modules_than_layers_names_its_key(tmp_path, key):
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "DeepSeek-V3" / "config.json").read_text())
    config[key] = 62  # DeepSeek-V3 has 61 layers and 1 MTP module
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert_user_error(invoke("models", "show", tmp_path / "config.json"), f"field '{key}'",
                      f"{key} <= num_hidden_layers", "num_hidden_layers=61")


def test_mtp_modules_as_many_as_the_layers_are_still_read(tmp_path):
    config = json.loads((ROOT / "tests" / "data" / "hf_configs" / "DeepSeek-V3" / "config.json").read_text())
    config["num_nextn_predict_layers"] = 61
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert invoke("models", "show", tmp_path / "config.json").exit_code == 0


@pytest.mark.parametrize("model, section, key", [
    ("deepseek-v3", "mla", "kv_lora_rank"),
    ("deepseek-v3", "mla", "v_head_dim"),
    ("deepseek-v3", "moe", "shared_expert_ffn_hidden_size"),
    ("deepseek-v3", "moe", "expert_ffn_hidden_size"),
    ("qwen3.5-397b-a17b", "linear_attention", "n_key_heads"),
])
def test_a_section_size_beyond_the_specs_own_bound_is_refused(tmp_path, model, section, key):
    """hidden_size 1e9 was refused (<= 100,000,000) but mla.kv_lora_rank 1e9 was read: a search spent 13 s to say
    the leanest plan needs 96,027.8 GiB per GPU."""
    spec = yaml.safe_load((ROOT / "profiles" / "models" / f"{model}.yaml").read_text())
    spec[section][key] = 1_000_000_000
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert_user_error(invoke("models", "show", path), "spec.yaml", f"field '{section}.{key}'", "must be <= 100,000,000")


def test_a_recurrent_state_wider_than_fp64_is_refused(tmp_path):
    spec = yaml.safe_load((ROOT / "profiles" / "models" / "qwen3.5-397b-a17b.yaml").read_text())
    spec["linear_attention"]["recurrent_state_bytes_per_element"] = 16
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    assert_user_error(invoke("models", "show", path), "field 'linear_attention.recurrent_state_bytes_per_element'",
                      "must be <= 8")


@pytest.mark.parametrize("gpus, flag, shown", [("8", "--memory-headroom", "plans keep 0% of HBM free"),
                                                ("8..16", "--grid-intensity", "0 t CO2e")])
def test_other_options_at_negative_zero_print_zero(gpus, flag, shown):
    """--memory-headroom -0 printed "plans keep -0% of HBM free", --grid-intensity -0 "-0 t CO2e"."""
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", gpus, "-s", "4096", "-b", "64",
                    *(["--tokens", "1e12"] if ".." in gpus else []), flag, "-0", "--top", "1")
    assert result.exit_code == 0, result.output
    assert shown in result.output and "-0%" not in result.output and "-0 t" not in result.output


@pytest.mark.parametrize("profile, capability, precision", [
    ("h100-sxm5-80gb", 8.0, "fp8"),      # a Hopper profile copied for an Ampere, its fp8 peak kept
    ("b200-sxm-180gb", 9.0, "mxfp8"),    # Blackwell's block-scaled formats on a Hopper capability
    ("rtx-pro-6000-blackwell", 7.5, "fp8"),
])
def test_a_peak_the_stated_compute_capability_has_no_tensor_cores_for_is_refused(tmp_path, profile, capability,
                                                                                 precision):
    """A profile stating compute_capability 8.0 beside an fp8 peak was read: fp8 plans were searched and ranked for
    a GPU whose capability has no fp8 tensor cores."""
    data = yaml.safe_load((ROOT / "profiles" / "hardware" / f"{profile}.yaml").read_text())
    data.update(name="my-gpu", compute_capability=capability)
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", "field 'compute_capability'",
                      f"a {precision} peak", "fix the capability or drop the peak")


def test_every_bundled_profile_agrees_with_its_compute_capability():
    for path in sorted((ROOT / "profiles" / "hardware").glob("*.yaml")):
        assert invoke("hardware", "show", path).exit_code == 0, path


@pytest.fixture(scope="module")
def capacity_search(tmp_path_factory):
    out = tmp_path_factory.mktemp("capacity14") / "cap"
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb,a100-sxm4-80gb", "--gpus", "8..16", "-s", "4096",
                    "-b", "64", "--tokens", "1e11", "--top", "2", "--out", out)
    assert result.exit_code == 0, result.output
    return json.loads((out / "plans.json").read_text())


@pytest.mark.parametrize("edit, field", [
    (lambda c: c.update(pue=-5), "capacity.pue"),
    (lambda c: c.update(grid_intensity_g_per_kwh=-100), "capacity.grid_intensity_g_per_kwh"),
    (lambda c: c["candidates"][0].update(gpus=-8), "capacity.candidates.gpus"),
    (lambda c: c["candidates"][0].update(gpus=8.5), "capacity.candidates.gpus"),
    (lambda c: c["candidates"][0].update(cost_usd=-5), "capacity.candidates.cost_usd"),
    (lambda c: c["candidates"][0].update(training_days=1e300), "capacity.candidates.training_days"),
])
def test_a_capacity_plans_json_edited_past_what_a_search_writes_is_refused_by_report(capacity_search, tmp_path,
                                                                                     edit, field):
    """The report printed a hand-edited capacity table as it stood: -8 GPUs, a cost of $-5, PUE -5 and 1e300 days
    written out with 300 digits; the plans' own estimates were range-checked already."""
    doc = json.loads(json.dumps(capacity_search))
    edit(doc["capacity"])
    (tmp_path / "plans.json").write_text(json.dumps(doc))
    result = invoke("report", tmp_path / "plans.json", "--out", tmp_path / "report", "--trials", "0")
    assert_user_error(result, "plans.json", f"field '{field}'", "must", "rerun the capacity search")
    assert not (tmp_path / "report").exists()


def test_an_unedited_capacity_plans_json_is_still_reported(capacity_search, tmp_path):
    (tmp_path / "plans.json").write_text(json.dumps(capacity_search))
    result = invoke("report", tmp_path / "plans.json", "--out", tmp_path / "report", "--trials", "0")
    assert result.exit_code == 0, result.output


@pytest.fixture(scope="module")
def stored_study(tmp_path_factory):
    db = tmp_path_factory.mktemp("study14") / "s.db"
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", *TRAIN, "--sampler", "random", "--trials", "3",
                    "--storage", f"sqlite:///{db}", "--study", "s", "--top", "1")
    assert result.exit_code in (0, 1), result.output
    return db


def _edited_study(db: Path, tmp_path: Path, edit) -> str:
    import shutil
    import sqlite3

    copy = tmp_path / "s.db"
    shutil.copy(db, copy)
    with sqlite3.connect(copy) as con:
        (text,) = con.execute("select value_json from study_user_attributes where key='autotune.problem'").fetchone()
        record = json.loads(text)
        edit(record)
        con.execute("update study_user_attributes set value_json=? where key='autotune.problem'", (json.dumps(record),))
    return f"sqlite:///{copy}"


@pytest.mark.parametrize("edit, says", [
    (lambda r: r.update(framework=None), "no attribute 'items'"),        # was an AttributeError traceback
    (lambda r: r.update(objectives=[]), "objectives is empty"),          # was an IndexError traceback inside Optuna
    (lambda r: r["workload"].update(seq_len=1e300), "workload.seq_len"),  # trials failed; the worker said it finished
    (lambda r: r["cluster"].update(n_gpus=1e300), "cluster.n_gpus"),
    (lambda r: r["workload"].update(tokens=1e300), "workload.tokens must be <= 1e+15"),
])
@pytest.mark.parametrize("command", ["worker", "report"])
def test_a_study_whose_stored_problem_was_edited_is_refused_without_a_traceback(stored_study, tmp_path, edit, says,
                                                                              command):
    storage = _edited_study(stored_study, tmp_path, edit)
    extra = ["--trials", "5"] if command == "worker" else ["--out", tmp_path / "report", "--trials", "0"]
    result = invoke(command, "--storage", storage, "--study", "s", *extra)
    assert_user_error(result, "field '--study'", "its stored problem cannot be read", says, "start a new study")


def test_an_unedited_study_is_still_joined(stored_study, tmp_path):
    result = invoke("worker", "--storage", _edited_study(stored_study, tmp_path, lambda r: None), "--study", "s",
                    "--trials", "4")
    assert result.exit_code == 0, result.output


def _edited_attr(db: Path, tmp_path: Path, key: str, value) -> str:
    import shutil
    import sqlite3

    copy = tmp_path / "attr.db"
    shutil.copy(db, copy)
    with sqlite3.connect(copy) as con:
        con.execute("update study_user_attributes set value_json=? where key=?", (json.dumps(value), key))
    return f"sqlite:///{copy}"


@pytest.mark.parametrize("key, value, says", [
    ("autotune.settings", None, "stored settings"),      # worker: TypeError traceback
    ("autotune.settings", "x", "stored settings"),       # search re-run: AttributeError traceback
    ("autotune.target_trials", None, "stored target"),   # worker: TypeError traceback
    ("autotune.target_trials", -1, "stored target"),
])
@pytest.mark.parametrize("command", ["worker", "report", "search"])
def test_a_study_whose_settings_or_target_were_edited_is_refused(stored_study, tmp_path, key, value, says, command):
    storage = _edited_attr(stored_study, tmp_path, key, value)
    args = {"worker": ["--trials", "5"], "report": ["--out", tmp_path / "report", "--trials", "0"],
            "search": ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", *TRAIN, "--sampler", "random", "--trials", "5"]}
    result = invoke(command, "--storage", storage, "--study", "s", *args[command])
    assert_user_error(result, "field '--study'", says, "cannot be read", "start a new study")


def test_calibrate_with_no_usable_row_names_the_command_that_says_why(tmp_path):
    """A serving-runs CSV none of whose rows can be expressed: calibrate names the file and the validate command that
    lists each row's reason (it said 'see `autotune validate --json`', without the file)."""
    data = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_runs.csv"
    lines = data.read_text().splitlines()
    rows = [line for line in lines[1:] if line.startswith("TRT014-0")][:3]
    bad = tmp_path / "runs.csv"
    bad.write_text("\n".join([lines[0], *(re.sub(r"(l40s-48gb|h100-sxm5-80gb|h200-sxm-141gb|a100-sxm4-80gb)",
                                                 "nonexistent-gpu", r) for r in rows)]) + "\n")
    result = CliRunner().invoke(app, ["calibrate", str(bad), "--out", str(tmp_path / "x.yaml")])
    assert result.exit_code == 2 and "Traceback" not in result.output
    assert f"autotune validate {bad} --json" in result.output.replace("\n", "")
    assert not (tmp_path / "x.yaml").exists()


@pytest.mark.parametrize("extra", ["rope_scaling: yarn", "rotary_percent: 0.5", "rope_theta: 500000.0"])
def test_rotary_settings_with_another_position_embedding_are_refused(tmp_path, extra):
    """A spec with position_embedding learned and a rotary setting: the Megatron launch file wrote neither (exit 0,
    no note), so one of the two is a mistake, and the spec is refused naming both."""
    text = (ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text()
    text = re.sub(r"(?m)^(position_embedding|rope_scaling|rotary_percent|rope_theta):.*\n", "", text)
    spec = tmp_path / "model.yaml"
    spec.write_text(text + f"position_embedding: learned\n{extra}\n")
    result = invoke("emit", "-p", "tp=1", "-f", "megatron", "-m", spec, "-H", "h100-sxm5-80gb", "--gpus", "8",
                    "-s", "4096", "-b", "64", "--out", tmp_path / "out")
    assert_user_error(result, "position_embedding", extra.split(":")[0])
    assert not (tmp_path / "out").exists()
    # the same file with rope loads
    spec.write_text(text + f"position_embedding: rope\n{extra}\n")
    ok = invoke("predict", "-m", spec, "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64", "-p", "tp=1")
    assert ok.exit_code in (0, 1) and "Traceback" not in ok.output, ok.output
