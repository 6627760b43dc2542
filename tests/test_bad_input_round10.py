"""What a hostile-input sweep (round 10) found accepted or unsaid.

Training runs CSVs with a throughput no GPU can reach (a value summed over the cluster, or per minute) or a precision
cell that names no precision: errors of the file -- one line naming the file, the row and the column, exit 2, no
traceback -- in `validate` and in `calibrate`, not a row that is predicted (and fitted to) or silently skipped.
`tune` with a benchmark program that cannot start, and `calibrate` that did not count the rows it skipped."""

from __future__ import annotations

import json

import pytest

from autotune.costmodel.flops import training_flops_per_token
from autotune.inputs.hardware import load_hardware
from autotune.training.runs import parse_row
from autotune.training.validation import PLAUSIBLE_PEAK_FACTOR, PLAUSIBLE_PRECISION_FACTOR, throughput_ceiling
from tests.test_bad_input import TRAINING_CSV, assert_user_error, csv_rows, invoke, predicted, write_csv


def _runs_with(tmp_path, column: str, value: str):
    rows = csv_rows(TRAINING_CSV)
    rows[0][column] = value
    return rows[0]["id"], write_csv(tmp_path / "runs.csv", rows, list(rows[0]))


def test_the_ceiling_is_five_times_the_peak_at_the_models_flops_per_token():
    rows = csv_rows(TRAINING_CSV)
    run = parse_row(next(r for r in rows if r["gpu"].startswith("a100")))
    hw = load_hardware(run.gpu)
    ceiling, why = throughput_ceiling(hw, run.model, run.workload.seq_len)
    # by hand: the A100's highest dense peak of a training precision (bf16: 312 TFLOP/s; not int8's 624 TOP/s)
    # x 5 / the model's FLOPs per token
    flops = training_flops_per_token(run.model, run.workload.seq_len, "none")
    assert ceiling == pytest.approx(PLAUSIBLE_PEAK_FACTOR * 312e12 / flops)
    assert "312 TFLOP/s" in why and run.model.name in why
    assert run.measured_tokens_per_s_per_gpu < ceiling / PLAUSIBLE_PEAK_FACTOR  # the real row: below the plain peak


@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_throughput_summed_over_the_cluster_is_refused(tmp_path, command):
    rows = csv_rows(TRAINING_CSV)
    real = float(rows[0]["measured_tokens_per_s_per_gpu"])
    rid, path = _runs_with(tmp_path, "measured_tokens_per_s_per_gpu", f"{real * 3072:g}")  # summed over 3,072 GPUs
    args = [command, path] + (["--out", str(tmp_path / "c.yaml")] if command == "calibrate" else [])
    result = invoke(*args)
    assert_user_error(result, "runs.csv", f"row {rid!r}", "measured_tokens_per_s_per_gpu <=", "must hold",
                      "per GPU")
    assert not (tmp_path / "c.yaml").exists()


def test_with_the_precision_known_the_ceiling_is_twice_that_precisions_peak():
    rows = csv_rows(TRAINING_CSV)
    run = parse_row(next(r for r in rows if r["gpu"] == "h100-sxm5-80gb" and r["precision"] == "bf16"))
    hw = load_hardware(run.gpu)
    flops = training_flops_per_token(run.model, run.workload.seq_len, "none")
    ceiling, why = throughput_ceiling(hw, run.model, run.workload.seq_len, "bf16")
    # by hand: H100 SXM's dense bf16 peak, 989.5 TFLOP/s, x 2 (not 5 x fp8's 1,979: a bf16 run summed over 8 GPUs
    # at 40% MFU, 3.2x its peak, would pass that)
    assert ceiling == pytest.approx(PLAUSIBLE_PRECISION_FACTOR * hw.peak_tflops["bf16"] * 1e12 / flops)
    assert hw.peak_tflops["bf16"] == pytest.approx(989.5) and "bf16 peak of 990 TFLOP/s" in why
    assert run.measured_tokens_per_s_per_gpu < ceiling / PLAUSIBLE_PRECISION_FACTOR


def test_a_throughput_at_the_ceiling_is_still_a_measurement(tmp_path):
    rows = csv_rows(TRAINING_CSV)
    run = parse_row(rows[0])
    ceiling, _ = throughput_ceiling(load_hardware(run.gpu), run.model, run.workload.seq_len,
                                    rows[0]["precision"] or None)
    rows[0]["measured_tokens_per_s_per_gpu"] = f"{ceiling * 0.99:.6g}"
    result = invoke("validate", write_csv(tmp_path / "runs.csv", rows, list(rows[0])), "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("value", ["bf17", "BF16", "fp32", "int8"])
@pytest.mark.parametrize("command", ["validate", "calibrate"])
def test_a_precision_cell_that_names_no_training_precision_is_an_error_of_the_file(tmp_path, command, value):
    rid, path = _runs_with(tmp_path, "precision", value)
    args = [command, path] + (["--out", str(tmp_path / "c.yaml")] if command == "calibrate" else [])
    result = invoke(*args)
    assert_user_error(result, "runs.csv", "field 'precision'", f"row {rid!r}", "bf16, fp16, fp8", repr(value))


# --- tune: a benchmark program that cannot start ------------------------------------------------------------------

TUNE = ["tune", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", "--trials", "2"]


@pytest.mark.parametrize("run, where", [("no-such-benchmark --steps 3", "is not on PATH"),
                                        ("./bench.sh", "does not exist"),
                                        ("./plain.sh", "is not executable; run chmod +x ./plain.sh")])
def test_tune_refuses_a_program_that_cannot_start_before_creating_the_study(tmp_path, monkeypatch, run, where):
    """It failed every trial with 'cannot start the command' after creating the storage file; now nothing is made."""
    work = tmp_path / "work"
    work.mkdir()
    (work / "plain.sh").write_text("#!/bin/sh\necho '{\"tokens_per_s_per_gpu\": 1000}'\n")  # not executable
    monkeypatch.chdir(work)
    result = invoke(*TUNE, "--run", run, "--storage", "sqlite:///t.db")
    assert_user_error(result, "field '--run'", repr(run.split()[0]), where)
    assert sorted(p.name for p in work.iterdir()) == ["plain.sh"]


def test_worker_refuses_a_program_that_cannot_start_before_opening_the_storage(tmp_path, monkeypatch):
    """With --wait it would create the storage and wait for the study before the program was ever tried."""
    monkeypatch.chdir(tmp_path)
    result = invoke("worker", "--storage", "sqlite:///w.db", "--study", "s", "--run", "no-such-benchmark",
                    "--wait", "600")
    assert_user_error(result, "field '--run'", "'no-such-benchmark'", "is not on PATH")
    assert list(tmp_path.iterdir()) == []


def test_a_shell_command_is_not_checked_as_a_program(tmp_path, monkeypatch):
    """--shell runs the text through /bin/sh: its first word may be a builtin or a variable, so it is not checked."""
    monkeypatch.chdir(tmp_path)
    result = invoke(*TUNE, "--shell", "--run", "cd . && echo '{\"tokens_per_s_per_gpu\": 1000}'",
                    "--storage", "sqlite:///t.db", "--json")
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize("absolute", [False, True])
def test_tune_runs_a_script_given_by_its_path(tmp_path, monkeypatch, absolute):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "bench.sh"
    script.write_text('#!/bin/sh\necho \'{"tokens_per_s_per_gpu": 1000}\'\n')
    script.chmod(0o755)
    result = invoke(*TUNE, "--run", str(script) if absolute else "./bench.sh", "--storage", "sqlite:///t.db", "--json")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "t.db").exists()


def test_training_calibrate_counts_the_rows_it_skipped(tmp_path):
    """The fit said '(N rows)' only, so rows it could not use vanished without a word; validate lists them."""
    rows = csv_rows(TRAINING_CSV)[:6]  # three source groups: a fit and its held-out groups, in 2 s rather than 12
    rows[1]["usable"] = "false"
    path = write_csv(tmp_path / "runs.csv", rows, list(rows[0]) + (["usable"] if "usable" not in rows[0] else []))
    validated = invoke("validate", path, "--json")
    n_skipped = len(json.loads(validated.stdout)["skipped"])
    assert n_skipped >= 1
    result = invoke("calibrate", path, "--out", tmp_path / "c.yaml", "--json")
    assert result.exit_code == 0, result.output
    fit = json.loads(result.stdout)
    assert fit["n_skipped"] == n_skipped and fit["n_rows"] + n_skipped == len(rows)
    text = invoke("calibrate", path, "--out", tmp_path / "c.yaml", "--force")
    assert f"{n_skipped} skipped" in " ".join(text.stdout.split())


# --- --price: a price per GPU-hour, not per node or month ---------------------------------------------------------

@pytest.mark.parametrize("args", [
    ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"],
    ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb,a100-sxm4-80gb", "--gpus", "8..16", "-s", "4096", "-b", "16",
     "--tokens", "1e9"],
    ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "1", "-p", "tp=1",
     "--input-len", "100", "--output-len", "100"],
])
@pytest.mark.parametrize("price", ["1e17", "1000.5"])
def test_a_price_beyond_any_gpu_hour_is_refused(args, price):
    """$1e17 per GPU-hour was accepted and ranked plans by it: a price per node-month or in cents is a slip."""
    assert_user_error(invoke(*args, "--price", price), "field '--price'", "<= 1,000 USD per GPU-hour must hold",
                      f"--price={float(price):g}")


def test_the_dearest_plausible_price_is_accepted():
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16",
                    "--price", "1000", "--tokens", "1e9", "--json", "--top", "1")
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["plans"][0]["estimate"]["cost_usd"] > 0


# --- predict's exit status: 1 only for a plan that cannot run -------------------------------------------------------

SERVE_70B = ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "8",
             "--input-len", "2048", "--output-len", "256", "-p", "tp=8,weights=fp8,kv=fp8", "--json"]


@pytest.mark.parametrize("load, key", [
    (["--ttft-ms", "1", "--tpot-ms", "1"], "misses"),  # targets no plan meets: an answer, not a failure
    (["--request-rate", "1000"], None),  # past the plan's capacity: TTFT without bound, still an answer
    ([], None),  # max throughput
])
def test_a_serving_plan_that_runs_exits_0_whatever_its_latency(load, key):
    result = invoke(*SERVE_70B, *load)
    estimate = predicted(result)["estimate"]
    assert result.exit_code == 0 and estimate["fits"]
    if key:
        assert estimate[key]


def test_tensor_parallelism_over_nodes_runs_with_a_warning_not_a_failure():
    """tp=8 on 4-GPU nodes: the engines launch it multi-node and the model prices its all-reduce over the network;
    search does not plan it, which predict says, exit 0 (it was 'does not fit', exit 1)."""
    args = ["predict", "--workload", "serve", "-m", "llama3-70b", "-H", "h100-sxm5-80gb", "--gpus", "16",
            "--gpus-per-node", "4", "--input-len", "2048", "--output-len", "256", "-p", "tp=8,weights=fp8,kv=fp8"]
    result = invoke(*args, "--json")
    estimate = predicted(result)["estimate"]
    assert result.exit_code == 0 and estimate["fits"]
    assert estimate["warning"].startswith("tp spans more than one NVLink domain")
    inside = predicted(invoke(*args[:10], "8", *args[11:], "--json"))["estimate"]  # 8-GPU nodes: NVLink
    assert "warning" not in inside and estimate["tpot_ms"] > inside["tpot_ms"]  # the network costs time
    text = invoke(*args)
    assert text.exit_code == 0 and "warning: tp spans more than one NVLink domain" in " ".join(text.stdout.split())
