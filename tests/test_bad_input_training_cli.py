"""Training commands on input a hostile-input sweep found mishandled: an overlay tune would overwrite, a launch
format for another framework than the search's, energy options outside capacity planning, a pinned etp on a
dense model, serving options on a training predict, a negative heartbeat, and explain's cluster overrides."""

from __future__ import annotations

import json
import sys

from tests.test_bad_input import SMALL, assert_user_error, invoke


def test_tune_keeps_an_existing_calibrate_file_unless_forced(tmp_path):
    keep = tmp_path / "calib.yaml"
    keep.write_text("mine\n")
    bench = f"{sys.executable} -c \"print('{{\\\"tokens_per_s_per_gpu\\\": 5000, \\\"peak_memory_gib\\\": 50}}')\""
    args = ["tune", *SMALL, "--trials", "2", "--prior-top", "2", "--heartbeat", "0", "--run", bench,
            "--storage", f"sqlite:///{tmp_path}/t.db", "--calibrate", keep]
    assert_user_error(invoke(*args), "calib.yaml", "--force")
    assert keep.read_text() == "mine\n"
    forced = invoke(*args, "--force")
    assert forced.exit_code == 0, forced.output
    assert keep.read_text() != "mine\n"


def test_a_search_refuses_launch_files_of_another_framework(tmp_path):
    result = invoke("search", *SMALL, "--framework", "torchtitan", "--emit", "megatron", "--out", tmp_path / "o")
    assert_user_error(result, "--emit", "megatron launch configs run megatron-lm", "torchtitan")
    assert not (tmp_path / "o").exists()
    same = invoke("search", *SMALL, "--framework", "torchtitan", "--emit", "torchtitan", "--out", tmp_path / "t")
    assert same.exit_code == 0, same.output


def test_energy_options_apply_to_capacity_planning_only():
    assert_user_error(invoke("search", *SMALL, "--pue", "-1"), "--pue", "capacity planning")
    assert_user_error(invoke("search", *SMALL, "--grid-intensity", "400"), "--grid-intensity")


def test_a_pinned_etp_on_a_dense_model_is_refused_not_dropped():
    """A dense model's etp is its tp: pinning it silently pinned tp; it is refused with the flag to use instead."""
    assert_user_error(invoke("search", *SMALL, "--fix", "etp=2"), "--fix", "is dense", "fix tp instead")
    result = invoke("search", *SMALL, "--fix", "tp=2", "--json")
    assert result.exit_code == 0, result.output
    assert all(p["plan"]["tp"] == 2 for p in json.loads(result.stdout)["plans"])


def test_a_training_predict_refuses_serving_options():
    base = ["predict", *SMALL, "-p", "tp=1"]
    assert_user_error(invoke(*base, "--ttft-ms", "-5"), "--ttft-ms", "--workload serve")
    assert_user_error(invoke(*base, "--input-len", "5"), "--input-len")
    assert_user_error(invoke(*base, "--engine", "sglang"), "--engine")


def test_a_negative_heartbeat_is_named(tmp_path):
    result = invoke("search", *SMALL, "--storage", f"sqlite:///{tmp_path}/hb.db", "--study", "hb", "--heartbeat", "-5")
    assert_user_error(result, "--heartbeat", ">= 0")


def test_explain_says_when_a_cluster_override_does_not_fit_the_files_plan(tmp_path):
    out = tmp_path / "run"
    assert invoke("search", *SMALL, "--out", out).exit_code == 0
    assert_user_error(invoke("explain", out, "--gpus", "3"), "--gpus", "cannot run on the cluster",
                      "leave --gpus out")


def test_small_study_and_cluster_options_are_checked(tmp_path):
    assert_user_error(invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--nodes", "2000000", "-s", "4096",
                             "-b", "64"), "--nodes", "10,000,000")
    assert_user_error(invoke("search", *SMALL, "--new"), "--new", "--storage")
    assert_user_error(invoke("tune", *SMALL, "--run", "true", "--prior-top", "-1",
                             "--storage", f"sqlite:///{tmp_path}/t.db"), "--prior-top")
    assert_user_error(invoke("worker", "--storage", f"sqlite:///{tmp_path}/w.db", "--study", "x", "--seed", "-1"),
                      "--seed")


def test_an_empty_framework_is_refused_not_read_as_the_default():
    for text in ("", " "):
        assert_user_error(invoke("search", *SMALL, "--framework", text), "--framework", "NAME[@VERSION]")
        assert_user_error(invoke("predict", *SMALL, "-p", "tp=1", "--framework", text), "--framework")


def test_an_engine_release_that_does_not_parse_is_named():
    from tests.test_bad_input import SERVE

    assert_user_error(invoke("search", *SERVE, "--engine", "vllm@latest"), "--engine", "NAME@MAJOR.MINOR")
    assert_user_error(invoke("predict", *SERVE, "-p", "tp=1", "--engine", "tgi@2.0"), "--engine", "vllm, sglang, trtllm")
