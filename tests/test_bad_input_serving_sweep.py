"""Serving commands and their round trip on input a hostile-input sweep found mishandled: flags typed at their
default value where they do not apply, --rank with a plan string, --trials on a serving report, an overlay written
over its own CSV through a hard link, --nodes on a serving emit, and a plans.json naming a space file that is gone."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
SERVE = ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2",
         "--input-len", "512", "--output-len", "128"]
TRAIN = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "2048", "-b", "64"]
DATA = Path(__file__).resolve().parent / "data"


def refused(result, flag: str, needle: str = "") -> None:
    assert result.exit_code == 2, result.output
    assert "Traceback" not in result.output and f"field '{flag}'" in result.output, result.output
    assert needle in result.output, result.output


@pytest.fixture(scope="module")
def serving_plans(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("serve") / "s"
    result = runner.invoke(app, [*SERVE, "--out", str(out)])
    assert result.exit_code == 0, result.output
    return out


@pytest.mark.parametrize("extra, flag", [
    (["--trials", "200"], "--trials"),
    (["--seed", "0"], "--seed"),
    (["--heartbeat", "30"], "--heartbeat"),
    (["--objective", "throughput"], "--objective"),
    (["--sampler", "auto"], "--sampler"),
])
def test_a_serving_search_refuses_training_flags_typed_at_their_default(extra, flag):
    """`--trials 200` passed where `--trials 5` was refused: the value was compared with the default."""
    refused(runner.invoke(app, [*SERVE, *extra]), flag, "does not apply to --workload serve")


@pytest.mark.parametrize("command", [["search", *TRAIN], ["predict", *TRAIN, "-p", "tp=1"]])
def test_training_refuses_engine_vllm_typed_out(command):
    """`--engine vllm` (the default) on a training command was ignored without a word; `--engine sglang` was not."""
    refused(runner.invoke(app, [*command, "--engine", "vllm"]), "--engine", "does not apply to training")


@pytest.mark.parametrize("args", [
    ["emit", "tp=1", "--format", "vllm", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2", "--input-len", "512",
     "--output-len", "128", "--rank", "2"],
    ["emit", "-p", "tp=1", *TRAIN, "-r", "2"],
    ["explain", "-p", "tp=1", *TRAIN, "--rank", "1"],
])
def test_rank_with_a_plan_string_is_refused(args):
    """--rank picks a plan of a plans.json; with a plan string it was read nowhere."""
    refused(runner.invoke(app, args), "--rank", "leave --rank out")


def test_a_serving_report_refuses_a_number_of_convergence_trials(serving_plans, tmp_path):
    result = runner.invoke(app, ["report", str(serving_plans), "--out", str(tmp_path / "r"), "--trials", "50"])
    refused(result, "--trials", "is a serving plans.json")
    assert not (tmp_path / "r" / "report.html").exists()
    skipped = runner.invoke(app, ["report", str(serving_plans), "--out", str(tmp_path / "r0"), "--trials", "0"])
    assert skipped.exit_code == 0, skipped.output  # 0 asks for no convergence runs, which a serving report has none of
    assert (tmp_path / "r0" / "report.html").exists()


@pytest.mark.parametrize("args", [["emit", "-p", "tp=1", "--format", "megatron", *TRAIN, "--rank", "0"],
                                  ["search", *TRAIN, "--heartbeat", "60"], ["search", *TRAIN, "--heartbeat", "30"]])
def test_a_flag_with_nothing_to_act_on_is_refused_before_its_range(args):
    """--rank with a plan string is named as such even when out of range; --heartbeat without a stored study."""
    refused(runner.invoke(app, args), args[-2], "leave --rank out" if args[-2] == "--rank" else "--storage")


def test_a_flag_counts_as_given_from_python_when_it_differs_from_its_default():
    """A command function called from Python (no command line): its value is compared with the default."""
    from autotune.cli.app import given_on_command_line

    assert given_on_command_line("engine", "sglang", "vllm")
    assert not given_on_command_line("engine", "vllm", "vllm")


def test_a_training_plans_json_naming_a_space_file_that_is_gone_says_which_field(tmp_path):
    made = runner.invoke(app, ["search", *TRAIN, "--top", "2", "--out", str(tmp_path / "run")])
    assert made.exit_code == 0, made.output
    document = json.loads((tmp_path / "run" / "plans.json").read_text())
    document["inputs"].pop("space_spec", None)
    document["inputs"]["space"] = str(tmp_path / "gone" / "space.yaml")
    edited = tmp_path / "old" / "plans.json"
    edited.parent.mkdir()
    edited.write_text(json.dumps(document))
    result = runner.invoke(app, ["report", str(edited), "--out", str(tmp_path / "r"), "--trials", "5"])
    refused(result, "inputs.space")
    assert str(edited) in result.output


def test_calibrate_refuses_an_out_that_is_a_hard_link_of_the_csv(tmp_path):
    """A hard link is the same file under another name: --force wrote the overlay over the measured runs."""
    runs = tmp_path / "runs.csv"
    shutil.copyfile(DATA / "serving_runs_small.csv", runs)
    before = runs.read_bytes()
    link = tmp_path / "calib.yaml"
    os.link(runs, link)
    result = runner.invoke(app, ["calibrate", str(runs), "--out", str(link), "--force"])
    refused(result, "--out", "is the CSV being calibrated")
    assert runs.read_bytes() == before


def _emit(*extra: str):
    return runner.invoke(app, ["emit", "tp=8", "--format", "vllm", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                               "--input-len", "512", "--output-len", "128", *extra])


def test_a_serving_emit_takes_nodes_as_search_and_predict_do():
    """--nodes was refused as a training flag on a serving emit, though search and predict take it."""
    by_nodes, by_gpus = _emit("--nodes", "2"), _emit("--gpus", "16")
    assert by_nodes.exit_code == 0, by_nodes.output
    assert by_nodes.output == by_gpus.output


@pytest.mark.parametrize("extra, flag, needle", [
    (["--gpus", "12"], "--gpus", "12 GPUs do not fill whole nodes of 8"),
    (["--nodes", "2", "--gpus", "8"], "--gpus", "give two of the three"),
])
def test_a_serving_emits_cluster_errors_name_the_flag(extra, flag, needle):
    """They read 'n_gpus must be a multiple of gpus_per_node ...', naming no flag."""
    refused(_emit(*extra), flag, needle)


def test_a_serving_emit_of_a_plans_json_refuses_nodes(serving_plans):
    refused(runner.invoke(app, ["emit", str(serving_plans), "--format", "vllm", "--nodes", "1"]), "--nodes",
            "comes from")


def test_a_plans_json_naming_a_space_file_that_is_gone_says_which_field(serving_plans, tmp_path):
    """An older plans.json (no space_spec) names its --space file; when it is gone the error was a bare
    'file not found' of a path the user never typed."""
    document = json.loads((serving_plans / "plans.json").read_text())
    document["inputs"].pop("space_spec")
    document["inputs"]["space"] = str(tmp_path / "gone" / "serve.yaml")
    edited = tmp_path / "old" / "plans.json"
    edited.parent.mkdir()
    edited.write_text(json.dumps(document))
    for args in (["explain", str(edited)], ["emit", str(edited), "--format", "sglang"],
                 ["report", str(edited), "--out", str(tmp_path / "r")]):
        result = runner.invoke(app, args)
        refused(result, "inputs.space", "embeds no space_spec")
        assert str(edited) in result.output


@pytest.mark.parametrize("engine", ["vllm", "sglang"])
def test_a_multi_node_serving_script_tells_the_user_its_own_file_name(engine, tmp_path):
    """The header said 'bash serve.sh' where the emitted file is serve_vllm.sh or serve_sglang.sh."""
    result = runner.invoke(app, ["emit", "tp=16", "--format", engine, "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "16", "--input-len", "100", "--output-len", "100",
                                 "--out", str(tmp_path / "launch")])
    assert result.exit_code == 0, result.output
    script = tmp_path / "launch" / f"serve_{engine}.sh"
    text = script.read_text()
    assert f"bash serve_{engine}.sh (k = 0 .. nodes-1" in text and "bash serve.sh" not in text
