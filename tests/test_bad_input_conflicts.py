"""Inputs that contradict each other, or that a command would otherwise ignore, are settled by the user: a
--space file's precisions against --precision, a damaged plans.json that some commands did not read.  Each case
runs the CLI through typer's CliRunner, as a user would."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
SMALL = ["--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8", "--seq-len", "4096",
         "--global-batch", "64"]


def _space(tmp_path: Path, precisions: str) -> Path:
    text = (ROOT / "search_spaces" / "train.yaml").read_text(encoding="utf-8")
    assert "  precision: [bf16]" in text
    path = tmp_path / "space.yaml"
    path.write_text(text.replace("  precision: [bf16]", f"  precision: [{precisions}]"), encoding="utf-8")
    return path


def test_a_space_files_precisions_are_searched(tmp_path):
    result = runner.invoke(app, ["search", *SMALL, "--space", str(_space(tmp_path, "fp8")), "--json"])
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert plans and {p["plan"]["precision"] for p in plans} == {"fp8"}


def test_precision_flag_and_space_file_that_disagree_are_refused(tmp_path):
    result = runner.invoke(app, ["search", *SMALL, "--space", str(_space(tmp_path, "fp8")), "--precision", "bf16"])
    assert_user_error(result, "--precision", "axes.precision=fp8")
    agree = runner.invoke(app, ["search", *SMALL, "--space", str(_space(tmp_path, "bf16, fp8")), "--precision",
                                "fp8,bf16", "--json"])
    assert agree.exit_code == 0, agree.output


@pytest.fixture(scope="module")
def small_plans(tmp_path_factory) -> dict:
    out = tmp_path_factory.mktemp("plans") / "run"
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return json.loads((out / "plans.json").read_text())


@pytest.mark.parametrize("edit, field", [
    (lambda d: d["inputs"].__setitem__("space_spec", 5), "inputs.space_spec"),
    (lambda d: d["inputs"].__setitem__("model_spec", "llama"), "inputs.model_spec"),
    (lambda d: d["plans"][0].__setitem__("estimate", None), "plans.estimate"),
])
@pytest.mark.parametrize("command", ["explain", "emit", "report"])
def test_every_reader_of_plans_json_refuses_the_same_damage(tmp_path, small_plans, edit, field, command):
    document = json.loads(json.dumps(small_plans))
    edit(document)
    folder = tmp_path / "damaged"
    folder.mkdir()
    (folder / "plans.json").write_text(json.dumps(document), encoding="utf-8")
    args = {"explain": ["explain", str(folder)],
            "emit": ["emit", str(folder), "--format", "megatron", "--out", str(tmp_path / "files")],
            "report": ["report", str(folder), "--out", str(tmp_path / "report")]}[command]
    assert_user_error(runner.invoke(app, args), field)
    assert not (tmp_path / "files").exists() and not (tmp_path / "report").exists()


def test_a_training_calibration_without_the_hardware_is_refused(tmp_path):
    """An overlay that calibrates other GPUs would change nothing: the user is told instead of getting the
    bundled values under a --calibration flag."""
    overlay = tmp_path / "calib.yaml"
    overlay.write_text("hardware:\n  a100-sxm4-80gb:\n    efficiency: {gemm: 0.5}\n", encoding="utf-8")
    for command in ("search", "predict"):
        extra = ["--plan", "tp=1,pp=1,zero=3,mbs=1"] if command == "predict" else []
        result = runner.invoke(app, [command, *SMALL, *extra, "--calibration", str(overlay)])
        assert_user_error(result, "--calibration", "h100-sxm5-80gb", "a100-sxm4-80gb")
    overlay.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: 0.5}\n", encoding="utf-8")
    fitted = runner.invoke(app, ["search", *SMALL, "--calibration", str(overlay), "--json"])
    plain = runner.invoke(app, ["search", *SMALL, "--json"])
    assert fitted.exit_code == 0 and plain.exit_code == 0, fitted.output
    slower = json.loads(fitted.stdout)["plans"][0]["estimate"]["step_time_s"]
    assert slower > json.loads(plain.stdout)["plans"][0]["estimate"]["step_time_s"]


@pytest.mark.parametrize("command", [
    ["predict", *SMALL],
    ["explain", *SMALL],
    ["emit", *SMALL, "--format", "megatron"],
    ["predict", "--workload", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
     "--input-len", "1000", "--output-len", "200"],
])
@pytest.mark.parametrize("plan", ["", "  "])
def test_an_empty_plan_string_is_refused_not_read_as_the_default_plan(tmp_path, command, plan):
    extra = ["--out", str(tmp_path / "files")] if command[0] == "emit" else []
    assert_user_error(runner.invoke(app, [*command, *extra, "--plan", plan]), "--plan", "is empty")


SERVE = ["predict", "--workload", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
         "--input-len", "1000", "--output-len", "200"]


@pytest.mark.parametrize("gpus, plan, why", [("8", "tp=8,ep=8", "ep > 1 on a dense model"),
                                             ("3", "tp=3", "heads not divisible by tp")])
def test_a_serving_plan_the_model_cannot_split_is_invalid_like_a_training_one(gpus, plan, why):
    """No throughput or latency is printed for a layout no engine launches; exit 1 as training's invalid plan."""
    result = runner.invoke(app, [*SERVE[:8], gpus, *SERVE[9:], "--plan", plan])
    assert result.exit_code == 1, result.output
    assert why in result.stderr and "invalid plan" in result.stderr and "tokens/s" not in result.stdout
    as_json = runner.invoke(app, [*SERVE[:8], gpus, *SERVE[9:], "--plan", plan, "--json"])
    assert as_json.exit_code == 1
    assert json.loads(as_json.stdout) == {"plan": json.loads(as_json.stdout)["plan"], "estimate": None, "invalid": why}


@pytest.mark.parametrize("engine, needle", [("sglang@0.0", "predates its first release"),
                                            ("trtllm@0.1", "predates its first release"),
                                            ("vllm@99.9", "newer than the newest release")])
def test_an_engine_release_that_never_existed_is_refused(engine, needle):
    assert_user_error(runner.invoke(app, [*SERVE, "--plan", "tp=8", "--engine", engine]), "--engine", needle)


@pytest.mark.parametrize("engine", ["vllm@0.6", "sglang@0.5.23", "trtllm@0.9", "trtllm@1.3"])
def test_engine_releases_within_the_known_span_are_predicted(engine):
    result = runner.invoke(app, [*SERVE, "--plan", "tp=8", "--engine", engine, "--json"])
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["estimate"]["tpot_ms"] > 0


@pytest.mark.parametrize("cells, field", [({"seq_len": "1e12"}, "seq_len"), ({"measured_mfu_pct": "500"}, "measured_mfu_pct"),
                                          ({"measured_iteration_time_s": "-3"}, "measured_iteration_time_s"),
                                          ({"zero": "9"}, "zero")])
def test_training_runs_csv_refuses_impossible_cells(tmp_path, cells, field):
    import csv

    with open(ROOT / "autotune" / "data" / "training_runs.csv", newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, list(rows[0]))
        writer.writeheader()
        writer.writerows([{**rows[0], **cells}, rows[1]])
    assert_user_error(runner.invoke(app, ["validate", str(path)]), field, rows[0]["id"])


@pytest.mark.parametrize("edit, field", [
    ({"rope_scaling": {"rope_type": "llama3", "factor": -8.0}}, "rope_scaling.factor"),
    ({"sliding_window": -1}, "sliding_window"),
])
def test_hf_config_values_a_family_does_not_read_are_still_checked(tmp_path, edit, field):
    config = {"model_type": "llama", "num_hidden_layers": 32, "hidden_size": 4096, "intermediate_size": 14336,
              "num_attention_heads": 32, "num_key_value_heads": 8, "vocab_size": 128256,
              "max_position_embeddings": 131072, "hidden_act": "silu"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, **edit}), encoding="utf-8")
    result = runner.invoke(app, ["predict", "--model", str(path), *SMALL[2:], "--plan", "tp=1,zero=3"])
    assert_user_error(result, field)


def test_serving_runs_of_any_known_release_calibrate_to_an_overlay_that_loads(tmp_path):
    """calibrate keys a runs-schema fit by release (trtllm-0.15, trtllm-1.2): the overlay loader reads every release
    --engine accepts, predict applies it with --engine NAME@X.Y, and rows of a release newer than autotune knows are
    skipped with the reason (as --engine trtllm@1.5 is refused), in validate and calibrate alike."""
    import csv

    bundled = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_runs.csv"
    with bundled.open(encoding="utf-8") as handle:
        rows = [r for r in csv.DictReader(handle) if r["engine_version"].startswith("0.14.0 (TensorRT")][:18]
    for i, row in enumerate(rows):
        row["engine_version"] = ("0.15.0", "1.2.0rc2", "1.5.0")[i % 3]
    runs = tmp_path / "runs.csv"
    with runs.open("w", encoding="utf-8", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    checked = runner.invoke(app, ["validate", str(runs), "--json"])
    assert checked.exit_code == 0, checked.output
    skipped = json.loads(checked.stdout)["skipped"]
    newer = [s for s in skipped if "1.5 is newer than the newest release" in s["reason"]]
    assert len(newer) == 6
    overlay = tmp_path / "fit.yaml"
    fitted = runner.invoke(app, ["calibrate", str(runs), "--out", str(overlay)])
    assert fitted.exit_code == 0, fitted.output
    serve = ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1",
             "--input-len", "1000", "--output-len", "100", "--plan", "tp=1", "--calibration", str(overlay)]
    for release in ("trtllm@0.15", "trtllm@1.2"):
        used = runner.invoke(app, [*serve, "--engine", release])
        assert used.exit_code == 0 and "from the --calibration overlay" in used.output, used.output
    assert_user_error(runner.invoke(app, [*serve, "--engine", "trtllm"]), "--calibration", "trtllm@1.2")
    text = overlay.read_text(encoding="utf-8").replace("trtllm-1.2:", "trtllm-1.5:")
    overlay.write_text(text, encoding="utf-8")
    assert_user_error(runner.invoke(app, [*serve, "--engine", "trtllm@0.15"]), "engines.trtllm-1.5", "newer")


def test_a_precision_the_gpu_lacks_names_the_flag_that_asked_for_it():
    base = ["search", "-m", "llama3-8b", "-s", "4096", "-b", "64", "-H", "a100-sxm4-80gb", "--gpus", "8"]
    assert_user_error(runner.invoke(app, [*base, "--fix", "precision=fp8"]), "--fix", "fix precision=bf16")
    assert_user_error(runner.invoke(app, [*base, "--precision", "fp8"]), "--precision", "search bf16")
    # a capacity plan over GPUs none of which has fp8 tensor cores is refused at once too
    capacity = ["search", "-m", "llama3-8b", "-s", "4096", "-b", "64", "--tokens", "1e11", "-H",
                "a100-sxm4-80gb,a100-sxm4-40gb", "--gpus", "8..16", "--precision", "fp8"]
    assert_user_error(runner.invoke(app, capacity), "--precision", "none of them has fp8", "a100-sxm4-80gb,a100-sxm4-40gb")
    # ... but one that some of them have is searched where it runs
    mixed = [*capacity[:10], "a100-sxm4-80gb,h100-sxm5-80gb", *capacity[11:], "--json"]
    result = runner.invoke(app, mixed)
    assert result.exit_code == 0, result.output
    capacity_doc = json.loads(result.stdout)["capacity"]
    assert capacity_doc["chosen"]["hardware"] == "h100-sxm5-80gb"
    # the GPU without fp8 says why it has no plan (not "no plan fits", which reads as memory)
    assert {c["note"] for c in capacity_doc["candidates"] if c["hardware"] == "a100-sxm4-80gb"} == {
        "no fp8 tensor cores on a100-sxm4-80gb"}


def test_a_serving_calibration_given_to_a_training_command_says_where_it_goes(tmp_path):
    overlay = tmp_path / "serving.yaml"
    overlay.write_text("schema: serving\nengines:\n  vllm: {gemm: 0.5}\n", encoding="utf-8")
    assert_user_error(runner.invoke(app, ["search", *SMALL, "--calibration", str(overlay)]),
                      "serving.yaml", "schema", "--workload serve")


def test_a_plans_json_with_a_byte_order_mark_is_read(tmp_path, small_plans):
    folder = tmp_path / "bom"
    folder.mkdir()
    (folder / "plans.json").write_bytes(b"\xef\xbb\xbf" + json.dumps(small_plans).encode("utf-8"))
    result = runner.invoke(app, ["explain", str(folder)])
    assert result.exit_code == 0, result.output


def test_a_serving_plan_that_misses_the_targets_says_so_in_its_launch_file(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                                 "1", "--input-len", "1024", "--output-len", "128", "--ttft-ms", "1", "--out", str(out),
                                 "--emit", "vllm"])
    assert result.exit_code == 1 and "no plan meets the targets" in " ".join(result.output.split())
    assert "# WARNING: this plan MISSES the targets (TTFT" in (out / "serve_vllm.sh").read_text()
    again = runner.invoke(app, ["emit", str(out), "--format", "vllm", "--out", str(tmp_path / "again")])
    assert again.exit_code == 0 and "misses the search's targets" in " ".join(again.output.split())
    assert "MISSES the targets" in (tmp_path / "again" / "serve_vllm.sh").read_text()
    # on another engine too: re-estimated at the search's load, against its targets
    other = runner.invoke(app, ["emit", str(out), "--format", "sglang", "--out", str(tmp_path / "other")])
    assert other.exit_code == 0 and "misses the search's targets on sglang" in " ".join(other.output.split())
    assert "MISSES the targets" in (tmp_path / "other" / "serve_sglang.sh").read_text()


def test_a_plan_searched_for_an_older_engine_release_says_its_flags_are_the_emitters(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                                 "8", "--input-len", "1024", "--output-len", "128", "--engine", "vllm@0.2",
                                 "--out", str(out), "--emit", "vllm"])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "estimated for vllm 0.2, but these flags are vllm 0.33's" in text
    assert "outside the releases measured there" in text and "its 2025-26 releases" in text
    assert "estimated for vllm 0.2" in (out / "serve_vllm.sh").read_text()
    current = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                                  "8", "--input-len", "1024", "--output-len", "128", "--engine", "vllm@0.33",
                                  "--out", str(tmp_path / "now"), "--emit", "vllm"])
    assert current.exit_code == 0 and "these flags are" not in current.output


@pytest.mark.parametrize("engine", ["vllm", "sglang", "trtllm"])
def test_a_max_batch_too_large_to_launch_is_said_as_such(engine):
    base = ["predict", "--workload", "serve", "--engine", engine, "-H", "h100-sxm5-80gb", "--gpus", "1",
            "--input-len", "1000", "--output-len", "100"]
    huge = runner.invoke(app, [*base, "-m", "llama3-8b", "-p", "tp=1,max_batch=100000"])
    assert "max_batch is too large" in " ".join(huge.output.split())
    heavy = runner.invoke(app, [*base, "-m", "llama3-70b", "-p", "tp=1"])  # 131 GiB of weights: not the batch
    text = " ".join(heavy.output.split())
    assert "weights and the engine's reserve leave no room" in text and "max_batch is too large" not in text


def test_files_written_replace_a_symbolic_link_rather_than_write_through_it(tmp_path):
    """A user's file a link in the --out folder points to is left alone (with --force the link is replaced); a
    dangling link counts as an existing file without --force."""
    import os

    mine = tmp_path / "mine.txt"
    mine.write_text("keep me", encoding="utf-8")
    out = tmp_path / "run"
    out.mkdir()
    os.symlink(mine, out / "plans.json")
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert mine.read_text(encoding="utf-8") == "keep me" and not (out / "plans.json").is_symlink()
    files = tmp_path / "files"
    files.mkdir()
    elsewhere = tmp_path / "elsewhere.sh"
    os.symlink(elsewhere, files / "megatron_pretrain_gpt.sh")  # dangling
    refused = runner.invoke(app, ["emit", str(out), "--format", "megatron", "--out", str(files)])
    assert refused.exit_code != 0 and "would overwrite" in " ".join(refused.output.split())
    forced = runner.invoke(app, ["emit", str(out), "--format", "megatron", "--out", str(files), "--force"])
    assert forced.exit_code == 0, forced.output
    assert not elsewhere.exists() and not (files / "megatron_pretrain_gpt.sh").is_symlink()


def test_an_integral_float_yarn_window_reads_as_exporters_write_it(tmp_path):
    config = json.loads((Path(__file__).resolve().parent.parent / "autotune" / "data" / "hf_configs"
                         / "Qwen--Qwen3-30B-A3B.json").read_text())
    config["rope_scaling"] = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768.0}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config), encoding="utf-8")
    result = runner.invoke(app, ["models", "show", str(path)])
    assert result.exit_code == 0 and "131072" in result.output, result.output


@pytest.mark.parametrize("change, field", [
    ({"rope_scaling": {"rope_type": "yarn"}}, "rope_scaling.factor"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": -5}},
     "rope_scaling.original_max_position_embeddings"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": "8192"}},
     "rope_scaling.original_max_position_embeddings"),
    ({"text_config": "llama"}, "text_config"),
])
def test_a_damaged_hf_config_block_is_refused_naming_the_field(tmp_path, change, field):
    config = json.loads((Path(__file__).resolve().parent.parent / "autotune" / "data" / "hf_configs"
                         / "Qwen--Qwen3-30B-A3B.json").read_text())
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**config, **change}), encoding="utf-8")
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", str(path), "-H", "h100-sxm5-80gb",
                                 "--gpus", "8", "--input-len", "1000", "--output-len", "100", "--plan", "tp=8"])
    assert_user_error(result, field, "config.json")


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_yaml_or_json_file_given_as_runs_is_said_to_be_one(tmp_path, command, small_plans):
    plans = tmp_path / "plans.json"
    plans.write_text(json.dumps(small_plans), encoding="utf-8")
    profile = Path(__file__).resolve().parent.parent / "profiles" / "hardware" / "h100-sxm5-80gb.yaml"
    for path, what in ((plans, "a JSON document"), (profile, "a YAML file")):
        extra = ["--out", str(tmp_path / "fit.yaml")] if command == "calibrate" else []
        assert_user_error(runner.invoke(app, [command, str(path), *extra]), what, "not a CSV")


def test_a_serving_plans_json_without_its_workload_key_is_said_to_miss_it(tmp_path):
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                                 "1", "--input-len", "1024", "--output-len", "128", "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "plans.json").read_text())
    del document["inputs"]["workload"]
    (out / "plans.json").write_text(json.dumps(document), encoding="utf-8")
    for args in (["explain", str(out)], ["report", str(out), "--out", str(tmp_path / "r")],
                 ["emit", str(out), "--format", "vllm", "--out", str(tmp_path / "e")]):
        assert_user_error(runner.invoke(app, args), "inputs.workload", "serving search")


def test_a_serving_plans_json_with_two_loads_names_the_file_field(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                               "1", "--input-len", "1024", "--output-len", "128", "--out", str(out)]).exit_code == 0
    document = json.loads((out / "plans.json").read_text())
    document["inputs"].update(concurrency=8, request_rate=2.0)
    (out / "plans.json").write_text(json.dumps(document), encoding="utf-8")
    assert_user_error(runner.invoke(app, ["explain", str(out)]), "plans.json", "field 'inputs.concurrency'")


def test_a_node_larger_than_the_profiles_nvlink_domain_is_noted():
    base = ["predict", "--workload", "serve", "-m", "llama3-8b", "--gpus", "16", "-p", "tp=16",
            "--input-len", "1000", "--output-len", "100"]
    larger = runner.invoke(app, [*base, "-H", "h100-sxm5-80gb", "--gpus-per-node", "16"])
    assert larger.exit_code == 0 and "8-GPU node: its node link" in " ".join(larger.output.split())
    within = runner.invoke(app, [*base, "-H", "gb200-nvl72", "--gpus-per-node", "8"])
    assert within.exit_code == 0 and "node link" not in within.output
    # ... but not the 4-GPU compute tray a Slurm host is: a launch file would ask each host for 8 GPUs
    assert "gb200-nvl72's nodes hold 4 GPUs" in " ".join(within.output.split())
    tray = runner.invoke(app, [*base, "-H", "gb200-nvl72", "--gpus-per-node", "4"])
    assert tray.exit_code == 0 and "note:" not in tray.output


SPACES = Path(__file__).resolve().parent.parent / "search_spaces"


def test_a_training_space_given_to_a_serving_search_is_said_to_be_one_and_back():
    serve = ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8",
             "--input-len", "100", "--output-len", "10", "--space", str(SPACES / "train.yaml")]
    assert_user_error(runner.invoke(app, serve), "train.yaml", "must be a serving search space")
    train = ["search", *SMALL, "--space", str(SPACES / "serve.yaml")]
    assert_user_error(runner.invoke(app, train), "serve.yaml", "must be a training search space")


def test_format_names_read_in_any_case_as_engine_names_do():
    result = runner.invoke(app, ["emit", "tp=1", "--format", "VLLM", "-m", "llama3-8b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "1", "--input-len", "100", "--output-len", "10"])
    assert result.exit_code == 0 and "vllm serve" in result.output


@pytest.mark.parametrize("header_prefix, first_line", [
    ("#,", None),  # a spreadsheet's row-number column
    ("", "# exported 2026-12-01, see https://example.org"),  # a comment line before the header
])
def test_a_real_csv_is_not_mistaken_for_yaml(tmp_path, header_prefix, first_line):
    bundled = Path(__file__).resolve().parent / "data" / "training_runs_small.csv"
    lines = bundled.read_text(encoding="utf-8").splitlines()
    if header_prefix:
        lines = [header_prefix + lines[0]] + [f"{i}," + line for i, line in enumerate(lines[1:], start=1)]
    if first_line:
        lines = [first_line] + lines
    path = tmp_path / "runs.csv"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    result = runner.invoke(app, ["validate", str(path)])
    assert "YAML" not in result.output and "Traceback" not in result.output


SERVE_SMALL = ["--workload", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
               "--input-len", "1024", "--output-len", "128"]


def test_a_forced_search_replaces_the_earlier_searchs_launch_files_and_keeps_the_users(tmp_path):
    """`search --out DIR --force` over an earlier search's folder removes the launch files that search recorded
    and this one does not write (they would launch a plan plans.json no longer holds), says so, and leaves
    files autotune did not write, and launch files written again, in place."""
    out = tmp_path / "run"
    first = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--emit", "deepspeed"])
    assert first.exit_code == 0, first.output
    assert {"deepspeed_launch.sh", "ds_config.json"} <= {p.name for p in out.iterdir()}
    assert set(json.loads((out / "plans.json").read_text())["launch_files"]) == {"deepspeed_launch.sh", "ds_config.json"}
    (out / "notes.txt").write_text("mine", encoding="utf-8")
    second = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--force", "--emit", "vllm"])
    assert second.exit_code == 0, second.output
    names = {p.name for p in out.iterdir()}
    assert names == {"plans.json", "plans.csv", "serve_vllm.sh", "notes.txt"}, names
    text = " ".join(second.stderr.split())
    assert "removed the earlier search's launch files" in text and "ds_config.json" in text
    third = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--force", "--emit", "vllm"])
    assert third.exit_code == 0 and "removed" not in third.stderr  # written again, not removed
    assert (out / "serve_vllm.sh").exists()


def test_a_forced_search_removes_nothing_a_damaged_record_names_outside_the_folder(tmp_path):
    """A hand-edited plans.json whose launch_files name a path outside --out (or plans.json itself) removes
    nothing there."""
    outside = tmp_path / "keep.sh"
    outside.write_text("echo keep", encoding="utf-8")
    out = tmp_path / "run"
    out.mkdir()
    (out / "plans.json").write_text(json.dumps({"inputs": {}, "plans": [], "launch_files": [
        "../keep.sh", str(outside), "plans.json", 3, None]}), encoding="utf-8")
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert outside.read_text(encoding="utf-8") == "echo keep" and (out / "plans.json").exists()


@pytest.mark.parametrize("workload", ["train", "serve"])
def test_explain_says_when_model_replaces_the_model_a_plans_json_was_searched_for(tmp_path, workload):
    """`explain PLANS -m OTHER` explains the plan for another model (a what-if the help names); it says so on
    stderr, and says nothing when -m names the searched model."""
    out = tmp_path / "run"
    args = SERVE_SMALL if workload == "serve" else SMALL
    assert runner.invoke(app, ["search", *args, "--out", str(out)]).exit_code == 0
    other = runner.invoke(app, ["explain", str(out), "-m", "llama3-70b"])
    assert other.exit_code in (0, 1), other.output  # 1: the plan may not fit the bigger model
    text = " ".join(other.stderr.split())
    assert "was searched for llama3-8b" in text and "for llama3-70b (--model)" in text, text
    same = runner.invoke(app, ["explain", str(out), "-m", "llama3-8b"])
    assert same.exit_code == 0 and "searched for" not in same.stderr
