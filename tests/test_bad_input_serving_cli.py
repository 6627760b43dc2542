"""Serving commands on input a hostile-input sweep found mishandled: a search where no plan fits, a prompt beyond
the model's context, pinned axes that leave no plan, a serving plan given to explain, the price of a plan, and
launch files for another engine than the ranking's."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
SERVE = ["search", "--workload", "serve", "--output-len", "128"]


@pytest.mark.parametrize("args", [
    ["-m", "llama3-405b", "-H", "l40s-48gb", "--gpus", "1", "--input-len", "1024"],
    ["-m", "llama3-405b", "-H", "h100-sxm5-80gb", "--gpus", "1..2", "--request-rate", "1", "--input-len", "1024"],
    ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "50000000"],
])
def test_a_serving_search_where_no_plan_fits_says_so(args):
    result = runner.invoke(app, [*SERVE, *args])
    assert result.exit_code == 1, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    assert "no serving plan fits" in result.output or "No GPU count" in result.output
    if "No GPU count" in result.output:  # and what to change
        assert "widen the --gpus range, lower --request-rate" in result.output


def test_a_prompt_beyond_the_models_context_is_no_plan():
    result = runner.invoke(app, [*SERVE, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                                 "--input-len", "20000"])
    assert result.exit_code == 1
    assert "exceed llama3-8b's context window of 8,192 tokens" in result.output
    assert "shorten --input-len/--output-len" in result.output
    predicted = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb",
                                    "--gpus", "1", "-p", "tp=1", "--input-len", "8000", "--output-len", "256", "--json"])
    assert predicted.exit_code == 1, predicted.output  # cannot run: exit 1, the numbers and reason still printed
    estimate = json.loads(predicted.stdout)["estimate"]
    assert not estimate["fits"] and "8,256 tokens" in estimate["infeasible_reason"]
    inside = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3.1-8b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "1", "-p", "tp=1,max_batch=8", "--input-len", "8000", "--output-len", "256",
                                 "--json"])
    assert json.loads(inside.stdout)["estimate"]["fits"]  # Llama 3.1: 131,072 tokens


def test_pinned_axes_that_leave_no_plan_are_named_in_the_hint():
    result = runner.invoke(app, [*SERVE, "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
                                 "--input-len", "1024", "--fix", "weights=fp4", "--checkpoint", "nvfp4",
                                 "--engine", "trtllm"])  # TensorRT-LLM's NVFP4 needs Blackwell
    assert result.exit_code == 1
    assert "--fix weights=fp4" in result.output and "weight precision not supported by the GPU" in result.output


def test_explain_refuses_a_serving_plan_string_with_the_way_to_explain_it():
    result = runner.invoke(app, ["explain", "-p", "tp=4,weights=fp8", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "8"])
    assert result.exit_code == 2
    assert "serving plan" in result.output and "autotune explain DIR" in result.output


def test_a_serving_plan_costs_its_gpus_price_per_hour_over_its_tokens():
    result = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "8", "-p", "tp=4,weights=fp8", "--input-len", "2048", "--output-len", "256",
                                 "--price", "3", "--json"])
    assert result.exit_code == 0, result.output
    e = json.loads(result.stdout)["estimate"]
    assert e["usd_per_hour"] == pytest.approx(24.0)  # 8 GPUs at $3
    # $24 an hour over the tokens of an hour, per million
    assert e["usd_per_million_output_tokens"] == pytest.approx(24.0 / (e["output_tokens_per_s"] * 3600) * 1e6)
    human = runner.invoke(app, ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                                "--gpus", "8", "-p", "tp=4,weights=fp8", "--input-len", "2048", "--output-len", "256",
                                "--price", "3"])
    assert "Cost: $24.00 per hour at $3 per GPU-hour" in human.output
    searched = runner.invoke(app, [*SERVE, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2", "--input-len",
                                   "512", "--price", "2", "--json"])
    plans = json.loads(searched.stdout)["plans"]
    assert plans and all(p["estimate"]["usd_per_hour"] == pytest.approx(4.0) for p in plans)


def test_launch_files_for_another_engine_than_the_ranking_say_so(tmp_path):
    result = runner.invoke(app, [*SERVE, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2", "--input-len", "512",
                                 "--engine", "trtllm", "--emit", "vllm", "--out", str(tmp_path / "s")])
    assert result.exit_code == 0, result.output
    assert "ranked for trtllm; the vllm files launch the best of them on vllm" in result.output
    assert (tmp_path / "s" / "serve_vllm.sh").exists()
    # emit without a format: no TensorRT-LLM launcher exists, and the message says which formats re-check the plan
    bare = runner.invoke(app, ["emit", str(tmp_path / "s" / "plans.json"), "--out", str(tmp_path / "e")])
    assert bare.exit_code == 2, bare.output
    assert "searched for TensorRT-LLM, for which autotune writes no launch files" in bare.output
    assert "--format vllm or --format sglang" in bare.output and "Traceback" not in bare.output


def test_a_yarn_scaled_config_has_the_longer_context(tmp_path):
    """Qwen3 states 40,960 positions; with YaRN x4 over its original 32,768 an engine allows 131,072 (vLLM
    derives its maximum model length so), and a 100k-token prompt is a plan."""
    from pathlib import Path

    config = json.loads(Path("autotune/data/hf_configs/Qwen--Qwen3-30B-A3B.json").read_text())
    plain = tmp_path / "config.json"
    plain.write_text(json.dumps(config))
    yarn = tmp_path / "yarn" / "config.json"
    yarn.parent.mkdir()
    yarn.write_text(json.dumps({**config, "rope_scaling": {"rope_type": "yarn", "factor": 4.0,
                                                          "original_max_position_embeddings": 32768}}))
    args = ["predict", "--workload", "serve", "-H", "h200-sxm-141gb", "--gpus", "1", "-p", "tp=1,max_batch=1",
            "--input-len", "100000", "--output-len", "256", "--json"]
    short = json.loads(runner.invoke(app, [*args, "-m", str(plain)]).stdout)["estimate"]
    assert not short["fits"] and "context window of 40,960 tokens" in short["infeasible_reason"]
    long = json.loads(runner.invoke(app, [*args, "-m", str(yarn)]).stdout)["estimate"]
    assert "context window" not in long.get("infeasible_reason", "")


def _csv_rows(path, keep, out):
    """The rows of a bundled CSV that ``keep`` selects, written to ``out`` with the full header."""
    from tests.test_bad_input import csv_rows, write_csv

    rows = csv_rows(path)
    return write_csv(out, [r for r in rows if keep(r)], list(rows[0]))


def test_calibrate_refuses_what_it_cannot_do_before_fitting(tmp_path):
    """Leave-one-model-out on rows of one model (it crashed with an IndexError after the fit), leave-one-model-out on
    a serving-runs CSV (ignored before), and an overlay written over the CSV it was fitted on."""
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "autotune" / "data"
    seen: list[str] = []

    def first_eight_of_one_model(r):
        if r["hf_model_id"] != "Qwen/Qwen3.5-397B-A17B" or r["quality_flags"] or r["duplicate_primary"] != "true":
            return False
        seen.append(r["id"])
        return len(seen) <= 8

    one = _csv_rows(data / "serving_silicon.csv", first_eight_of_one_model, tmp_path / "one.csv")
    runs = _csv_rows(data / "serving_runs.csv", lambda r: r["id"].startswith("TRT014-00"), tmp_path / "runs.csv")
    cases = [
        (["calibrate", str(one), "--out", str(tmp_path / "a.yaml"), "--leave-one-out"], "at least two models"),
        (["calibrate", str(runs), "--out", str(tmp_path / "b.yaml"), "--leave-one-out"], "drop --leave-one-out"),
        (["calibrate", str(runs), "--out", str(runs), "--force"], "is the CSV being calibrated"),
        (["calibrate", str(runs), "--out", str(runs)], "is the CSV being calibrated"),  # not 'pass --force'
    ]
    for args, expected in cases:
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "Traceback" not in result.output and expected in result.output, result.output
    assert (tmp_path / "runs.csv").read_text().startswith("id,")  # the CSV is still the CSV
    assert not (tmp_path / "a.yaml").exists() and not (tmp_path / "b.yaml").exists()


def test_validate_refuses_an_overlay_for_none_of_the_rows_engines(tmp_path):
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "autotune" / "data"
    runs = _csv_rows(data / "serving_runs.csv", lambda r: r["id"].startswith("TRT014-00"), tmp_path / "runs.csv")
    overlay = tmp_path / "sglang.yaml"
    overlay.write_text("schema: serving\nengines:\n  sglang:\n    gemm: 0.5\n")
    result = runner.invoke(app, ["validate", str(runs), "--calibration", str(overlay)])
    assert result.exit_code == 2, result.output
    assert "has parameters for sglang, but the rows are of trtllm-0.14" in result.output


def test_a_searched_release_is_recorded_and_holds_for_an_edited_plan(tmp_path):
    """plans.json records the release the search named (trtllm@0.14); explain, emit and report refuse a plan edited
    into one that release is not planned for, as predict does."""
    out = tmp_path / "s"
    result = runner.invoke(app, [*SERVE, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "2", "--input-len",
                                 "1024", "--engine", "trtllm@0.14", "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "plans.json").read_text())
    assert document["inputs"]["engine_release"] == "trtllm@0.14"
    assert runner.invoke(app, ["explain", str(out / "plans.json")]).exit_code == 0
    document["plans"][0]["plan"] = {
        "mode": "disagg", "prefill_workers": 1, "prefill_tp": 1, "prefill_pp": 1, "prefill_dp": 1, "prefill_ep": 1,
        "decode_workers": 1, "decode_tp": 1, "decode_pp": 1, "decode_dp": 1, "decode_ep": 1, "weights": "bf16",
        "kv": "bf16", "max_batch": 64, "replicas": 1}
    edited = tmp_path / "edited" / "plans.json"
    edited.parent.mkdir()
    edited.write_text(json.dumps(document))
    for args in (["explain", str(edited)], ["emit", str(edited), "--format", "vllm", "--out", str(tmp_path / "e")],
                 ["report", str(edited), "--out", str(tmp_path / "r")]):
        refused = runner.invoke(app, args)
        assert refused.exit_code == 2, (args, refused.output)
        assert "trtllm@0.14 is planned aggregated only" in refused.output and "Traceback" not in refused.output
    document["inputs"]["engine_release"] = "vllm@0.14"
    edited.write_text(json.dumps(document))
    wrong = runner.invoke(app, ["explain", str(edited)])
    assert wrong.exit_code == 2 and "inputs.engine_release" in wrong.output


def test_emit_refuses_a_launch_beyond_the_models_context(tmp_path):
    """vLLM refuses --max-model-len and SGLang --context-length beyond the model's window: no script is written."""
    for fmt in ("vllm", "sglang"):
        out = tmp_path / fmt
        result = runner.invoke(app, ["emit", "tp=4,max_batch=64", "--format", fmt, "-m", "llama3-70b", "-H",
                                     "h100-sxm5-80gb", "--gpus", "8", "--input-len", "100000", "--output-len", "256",
                                     "--out", str(out)])
        assert result.exit_code == 2, result.output
        assert "exceed llama3-70b's context window of 8,192 tokens" in result.output
        assert not out.exists() or not any(out.iterdir())


SERVE_8 = [*SERVE, "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "2048"]


@pytest.mark.parametrize("extra, field, needle", [
    (["--fix", "replicas=2"], "--fix", "replicas is not an axis"),
    (["--fix", "prefill_tp=2", "--fix", "mode=agg"], "--fix", "mode=agg is fixed too"),
    (["--fix", ""], "--fix", "is empty"),
    (["--trials", "5"], "--trials", "does not apply to --workload serve"),
    (["--seed", "3"], "--seed", "does not apply to --workload serve"),
    (["--new"], "--new", "does not apply to --workload serve"),
    (["--heartbeat", "-1"], "--heartbeat", "does not apply to --workload serve"),
])
def test_a_serving_search_refuses_settings_it_would_ignore(extra, field, needle):
    result = runner.invoke(app, [*SERVE_8, *extra])
    assert result.exit_code == 2, result.output
    assert f"field '{field}'" in result.output and needle in result.output and "Traceback" not in result.output


def test_files_that_are_not_what_they_claim_are_named(tmp_path):
    from pathlib import Path

    data = Path(__file__).resolve().parent.parent / "autotune" / "data"
    lines = (data / "serving_runs.csv").read_text().splitlines()[:3]
    semicolons = tmp_path / "semicolons.csv"
    semicolons.write_text("\n".join(line.replace(",", ";") for line in lines) + "\n")
    result = runner.invoke(app, ["validate", str(semicolons)])
    assert result.exit_code == 2 and "separated by semicolons" in result.output, result.output
    header = lines[0].split(",")
    keep = [i for i, c in enumerate(header) if c != "output_tokens_per_s_per_gpu"]
    missing = tmp_path / "missing.csv"
    missing.write_text("\n".join(",".join(line.split(",")[i] for i in keep) for line in lines[:1]) + "\n")
    result = runner.invoke(app, ["validate", str(missing)])
    assert result.exit_code == 2 and "missing column(s) output_tokens_per_s_per_gpu" in result.output, result.output
    out = tmp_path / "s"
    assert runner.invoke(app, [*SERVE, "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1", "--input-len",
                               "1024", "--out", str(out)]).exit_code == 0
    document = json.loads((out / "plans.json").read_text())
    document["inputs"]["workload"] = "foo"
    (out / "plans.json").write_text(json.dumps(document))
    for args in (["explain", str(out)], ["report", str(out), "--out", str(tmp_path / "r")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2 and "inputs.workload" in result.output, (args, result.output)


@pytest.mark.parametrize("bundled, column", [
    ("training_runs.csv", "measured_tokens_per_s_per_gpu"),
    ("serving_runs.csv", "output_tokens_per_s_per_gpu"),
])
def test_a_vanishing_measurement_is_refused_not_divided_by(bundled, column, tmp_path):
    """1e-300 tokens/s printed a 300-digit MAPE (validate) or a NaN error naming nothing (calibrate)."""
    from pathlib import Path

    from tests.test_bad_input import csv_rows, write_csv

    rows = csv_rows(Path(__file__).resolve().parent.parent / "autotune" / "data" / bundled)[:4]
    rows[1][column] = "1e-300"
    path = write_csv(tmp_path / bundled, rows)
    for args in (["validate", str(path)], ["calibrate", str(path), "--out", str(tmp_path / "c.yaml")]):
        result = runner.invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert f"field '{column}'" in result.output and "at least 0.001" in result.output


def test_emit_of_a_missing_plans_folder_says_no_such_file(tmp_path):
    for fmt in ("vllm", "megatron"):
        result = runner.invoke(app, ["emit", str(tmp_path / "no-such-search"), "--format", fmt])
        assert result.exit_code == 2 and "no such file" in result.output, result.output
    # a plan string without '=' (the search table's label) is read as a path: the message names both readings
    typo = runner.invoke(app, ["emit", "tp2", "--format", "vllm", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                               "2", "--input-len", "100", "--output-len", "10"])
    assert typo.exit_code == 2 and "no such file" in typo.output and "key=value pairs" in typo.output


def test_emit_names_the_flag_that_set_a_request_beyond_the_context():
    result = runner.invoke(app, ["emit", "tp=4", "--format", "vllm", "-m", "llama3-70b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "8", "--seq-len", "9000"])
    assert result.exit_code == 2 and "field '--seq-len'" in result.output and "shorten --seq-len" in result.output


def test_hardware_aliases_users_type():
    for alias, name in (("b200", "b200-sxm-180gb"), ("h200", "h200-sxm-141gb"), ("l40s", "l40s-48gb")):
        result = runner.invoke(app, ["hardware", "show", alias])
        assert result.exit_code == 0 and name in result.output
    assert runner.invoke(app, ["hardware", "show", "h100"]).exit_code == 2  # two H100 profiles: no alias
