"""Capacity planning: parsing --gpus ranges and --deadline, energy and emissions, and the search across pairs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.errors import InputError
from autotune.inputs.request import parse_gpus
from autotune.search import capacity as cap

runner = CliRunner()
SMALL = ["-m", "llama3-8b", "-s", "4096", "-b", "64", "--tokens", "1e11"]


def test_parse_gpus_keeps_plain_counts():
    assert parse_gpus("64") == (64, None)
    assert parse_gpus(None) == (None, None)
    assert parse_gpus("64..4096") == (None, (64, 4096))


@pytest.mark.parametrize("text", ["abc", "64..", "4096..64", "0..8", "8...16"])
def test_parse_gpus_rejects_bad_ranges(text):
    with pytest.raises(InputError, match="--gpus"):
        parse_gpus(text)


def test_gpu_counts_whole_nodes_powers_of_two_and_ends():
    assert cap.gpu_counts(64, 4096, 8) == [64, 128, 256, 512, 1024, 2048, 4096]
    assert cap.gpu_counts(100, 1000, 8) == [104, 128, 256, 512, 1000]
    assert cap.gpu_counts(1, 16, 8) == [1, 2, 4, 8, 16]
    with pytest.raises(InputError, match="--gpus"):
        cap.gpu_counts(9, 15, 8)


@pytest.mark.parametrize("text,days", [("30d", 30), ("720h", 30), ("2w", 14), ("1.5e1d", 15), ("2mo", 60)])
def test_parse_duration(text, days):
    assert cap.parse_duration_days(text) == pytest.approx(days)


@pytest.mark.parametrize("text", ["soon", "30y", "0d", "-3d"])
def test_parse_duration_rejects(text):
    with pytest.raises(InputError, match="--deadline"):
        cap.parse_duration_days(text)


def test_footprint_arithmetic():
    # 1000 GPUs x 500 W x 24 h x PUE 1.5 = 18 MWh; at 400 g/kWh = 7.2 t.
    f = cap.footprint(1000, 1.0, 500.0, 2.0, 1.5, 400.0)
    assert f["gpu_hours"] == pytest.approx(24_000)
    assert f["cost_usd"] == pytest.approx(48_000)
    assert f["energy_mwh"] == pytest.approx(18.0)
    assert f["co2e_t"] == pytest.approx(7.2)


def test_pue_and_intensity_defaults_and_bounds():
    assert cap.check_pue(None) == cap.DEFAULT_PUE == 1.58
    assert cap.check_grid_intensity(None) == cap.DEFAULT_GRID_INTENSITY == 475.0
    with pytest.raises(InputError, match="--pue"):
        cap.check_pue(0.9)
    with pytest.raises(InputError, match="--grid-intensity"):
        cap.check_grid_intensity(-1)


def _cand(hw, n, days, cost):
    return cap.Candidate(hw, n, 8, {"tp": 1}, {"memory_gib_per_gpu": 10.0},
                         {"training_days": days, "cost_usd": cost, "gpu_hours": 0, "energy_mwh": 0, "co2e_t": 0},
                         meets_deadline=days <= 30)


def test_choose_cheapest_in_time_and_fastest():
    cands = [_cand("a", 8, 60, 100), _cand("a", 16, 29, 120), _cand("b", 32, 10, 200)]
    found = cap.choose(cands, "cost", 30, 1.58, 475)
    assert (found.chosen.gpus, found.cheapest.gpus, found.fastest.gpus) == (16, 16, 32)
    assert cap.choose(cands, "time", 30, 1.58, 475).chosen.gpus == 32


def test_capacity_search_cli_json():
    result = runner.invoke(app, ["search", *SMALL, "-H", "h100-sxm5-80gb,a100-sxm4-80gb", "--gpus", "8..32",
                                 "--deadline", "30d", "--objective", "cost", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    capacity = doc["capacity"]
    assert {(c["hardware"], c["gpus"]) for c in capacity["candidates"]} == {
        (h, n) for h in ("h100-sxm5-80gb", "a100-sxm4-80gb") for n in (8, 16, 32)}
    chosen = capacity["chosen"]
    assert chosen["meets_deadline"] and chosen["training_days"] <= 30
    in_time = [c for c in capacity["candidates"] if c["meets_deadline"]]
    assert chosen["cost_usd"] == min(c["cost_usd"] for c in in_time)
    assert capacity["fastest"]["training_days"] == min(c["training_days"] for c in capacity["candidates"] if c["plan"])
    for key in ("gpu_hours", "cost_usd", "energy_mwh", "co2e_t", "training_days"):
        assert chosen[key] > 0
    # The JSON contract of search holds for the chosen pair's plans.
    assert doc["plans"] and doc["inputs"]["gpus"] == chosen["gpus"]
    assert doc["plans"][0]["estimate"]["energy_mwh"] == pytest.approx(chosen["energy_mwh"])


def test_capacity_flags_override_defaults():
    args = ["search", *SMALL, "-H", "h100-sxm5-80gb", "--gpus", "8..16", "--json"]
    base = json.loads(runner.invoke(app, args).stdout)["capacity"]["chosen"]
    doc = json.loads(runner.invoke(app, [*args, "--pue", "1.1", "--grid-intensity", "57"]).stdout)
    other = doc["capacity"]["chosen"]
    assert other["energy_mwh"] == pytest.approx(base["energy_mwh"] * 1.1 / 1.58)
    assert other["co2e_t"] == pytest.approx(other["energy_mwh"] * 57 / 1000)


def test_capacity_human_output_and_errors():
    result = runner.invoke(app, ["search", *SMALL, "-H", "h100-sxm5-80gb", "--gpus", "8..16", "--deadline", "720h"])
    assert result.exit_code == 0, result.output
    assert "MWh" in result.stdout and "t CO2e" in result.stdout and "Cheapest in time" in result.stdout
    missing = runner.invoke(app, ["search", "-m", "llama3-8b", "-s", "4096", "-b", "64", "-H", "h100-sxm5-80gb",
                                  "--gpus", "8..16"])
    assert missing.exit_code == 2 and "--tokens" in missing.output
    late = runner.invoke(app, ["search", *SMALL, "-H", "h100-sxm5-80gb", "--gpus", "8..16", "--deadline", "1h"])
    assert late.exit_code == 1 and "deadline" in late.output


def test_plain_gpu_count_unchanged():
    result = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096",
                                 "-b", "16", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    assert "capacity" not in doc and doc["inputs"]["gpus"] == 8


def _serving_capacity(rate: float, high: int, calls: list[int]):
    from autotune.inputs.hardware import load_hardware
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import ServeWorkload
    from autotune.search import serving as S
    from autotune.serving.calibrated import params_for
    from autotune.serving.space import load_serve_space

    real = S.serve_search

    def counted(model, cluster, *args, **kwargs):
        calls.append(cluster.n_gpus)
        return real(model, cluster, *args, **kwargs)

    workload = ServeWorkload(1024, 128, request_rate=rate, ttft_ms=2000.0, tpot_ms=50.0)
    space = load_serve_space(None).fixed({"tp": 1, "weights": "bf16", "kv": "bf16"})
    original, S.serve_search = S.serve_search, counted
    try:
        return S.capacity_search(load_model("llama3-8b"), load_hardware("h100-sxm5-80gb"), 8, 1, high, workload,
                                 space, params_for("vllm"))
    finally:
        S.serve_search = original


def test_serving_capacity_finds_the_fewest_nodes_by_doubling():
    """Beyond a node, a GPU count that meets the targets keeps meeting them at twice the count, so the capacity
    search doubles, then tries the counts below the first that meets: the same answer as trying every count,
    in a few searches."""
    from autotune.search import serving as S

    calls: list[int] = []
    found = _serving_capacity(300.0, 256, calls)
    assert found.n_gpus is not None and found.n_gpus > 8
    from autotune.inputs.hardware import Cluster, load_hardware
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import ServeWorkload
    from autotune.serving.calibrated import params_for
    from autotune.serving.space import load_serve_space

    workload = ServeWorkload(1024, 128, request_rate=300.0, ttft_ms=2000.0, tpot_ms=50.0)
    space = load_serve_space(None).fixed({"tp": 1, "weights": "bf16", "kv": "bf16"})
    hw = load_hardware("h100-sxm5-80gb")
    first = next(n for n in S.gpu_counts(1, 256, 8)  # every count in turn
                 if S.serve_search(load_model("llama3-8b"), Cluster(hw, n, min(8, n)), workload, space,
                                   params_for("vllm")).meeting)
    assert found.n_gpus == first
    assert len(calls) <= 8 + 2 * 5 + 2  # the 8 counts within a node, then ~2 log2(32 nodes)
    assert [g for g, _ in found.tried] == sorted(g for g, _ in found.tried)


def test_serving_capacity_gives_up_on_an_unreachable_rate_in_a_few_searches():
    calls: list[int] = []
    found = _serving_capacity(1e7, 4096, calls)
    assert found.n_gpus is None and found.result is None
    assert len(calls) <= 8 + 10 + 1  # 512 node counts: doubling reaches the last in 10 steps


def test_serving_capacity_is_exact_when_a_replica_spans_two_nodes():
    """Llama-3 405B in bf16 needs 2-node replicas: 32 GPUs serve 2 requests/s, 40 cannot hold whole replicas.
    The fewest count is the first of the full scan, though meeting is not monotone in the count."""
    from autotune.inputs.hardware import Cluster, load_hardware
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import ServeWorkload
    from autotune.search import serving as S
    from autotune.serving.calibrated import params_for
    from autotune.serving.space import load_serve_space

    model, hw = load_model("llama3-405b"), load_hardware("h100-sxm5-80gb")
    workload = ServeWorkload(1024, 256, request_rate=2.0, ttft_ms=2000.0, tpot_ms=50.0)
    space = load_serve_space(None).fixed({"weights": "bf16", "kv": "bf16", "mode": "agg"})
    meeting = {n: S.serve_search(model, Cluster(hw, n, 8), workload, space, params_for("vllm")).meeting
               for n in (24, 32, 40)}
    assert meeting[32] and not meeting[24] and not meeting[40]  # the case this test is about
    found = S.capacity_search(model, hw, 8, 1, 128, workload, space, params_for("vllm"))
    assert found.n_gpus == 32


def test_capacity_with_a_calibration_of_one_of_the_listed_gpus_applies_it_there(tmp_path):
    """Comparing GPUs with a fit of one of them: the overlay acts on the GPU it calibrates, the others keep their
    profiles' values (and the output says so); an overlay for none of the listed GPUs is refused."""
    overlay = tmp_path / "calib.yaml"
    overlay.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: 0.3}\n", encoding="utf-8")
    args = ["search", *SMALL, "-H", "h100-sxm5-80gb,a100-sxm4-80gb", "--gpus", "8..16", "--json"]
    plain = json.loads(runner.invoke(app, args).stdout)["capacity"]["candidates"]
    result = runner.invoke(app, [*args, "--calibration", str(overlay)])
    assert result.exit_code == 0, result.output
    capacity = json.loads(result.stdout)["capacity"]
    assert capacity["calibration_not_applied_to"] == ["a100-sxm4-80gb"]
    days = {(c["hardware"], c["gpus"]): c["training_days"] for c in capacity["candidates"]}
    for c in plain:
        key = (c["hardware"], c["gpus"])
        if c["hardware"] == "a100-sxm4-80gb":
            assert days[key] == pytest.approx(c["training_days"])
        else:  # a lower GEMM efficiency: slower
            assert days[key] > c["training_days"] * 1.1
    text = runner.invoke(app, args[:-1] + ["--calibration", str(overlay)])
    assert text.exit_code == 0 and "no values for a100-sxm4-80gb" in " ".join(text.output.split())
    overlay.write_text("hardware:\n  b200-sxm-180gb:\n    efficiency: {gemm: 0.3}\n", encoding="utf-8")
    refused = runner.invoke(app, [*args, "--calibration", str(overlay)])
    assert refused.exit_code == 2 and "Traceback" not in refused.output
    assert "--calibration" in refused.output and "b200-sxm-180gb" in refused.output


def test_a_capacity_plan_where_nothing_fits_says_so_not_that_a_deadline_was_missed():
    result = runner.invoke(app, ["search", "-m", "llama3-70b", "-s", "4096", "-b", "64", "--tokens", "1e11",
                                 "-H", "a100-sxm4-40gb", "--gpus", "1..2"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    text = " ".join(result.output.split())
    assert "no plan fits on any of the GPUs" in text and "deadline" not in text.split("Money at")[-1]


def test_at_price_zero_capacity_and_serving_cost_lines_say_what_they_are():
    # Every plan costs $0 at --price 0: the tie goes to the fewest GPUs, which is not "cheapest"; and a serving
    # plan at $0 per hour costs $0 per million tokens, not "no output tokens to price".
    result = runner.invoke(app, ["search", *SMALL, "-H", "h100-sxm5-80gb", "--gpus", "8..16", "--deadline", "720h",
                                 "--price", "0"])
    assert result.exit_code == 0, result.output
    assert "Cheapest in time" not in result.stdout and "Fewest GPUs in time" in result.stdout
    served = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "1", "--request-rate", "2", "--input-len", "512", "--output-len", "128",
                                 "--price", "0"])
    assert served.exit_code == 0, served.output
    assert "$0.000 per million output tokens" in served.stdout and "no output tokens to price" not in served.stdout


def test_serving_capacity_tried_counts_the_runnable_plans_under_their_own_name():
    """search.meeting_targets counts every plan that meets the targets; the capacity counts only those whose weights
    the checkpoint runs.  On a B200 a bf16 Llama-3 8B checkpoint cannot run the NVFP4 plans, so the two differ, and
    each count of capacity.tried (and its text label) says which it is."""
    args = ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "b200", "--gpus", "1..4", "--input-len", "512",
            "--output-len", "128", "--request-rate", "20", "--ttft-ms", "1000", "--tpot-ms", "50", "--top", "1"]
    result = runner.invoke(app, [*args, "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    tried = doc["capacity"]["tried"]
    assert [set(t) for t in tried] == [{"gpus", "meeting_runnable"}] * len(tried)
    last = tried[-1]
    assert last["gpus"] == doc["capacity"]["gpus"]
    assert 0 < last["meeting_runnable"] < doc["search"]["meeting_targets"]
    text = runner.invoke(app, args)
    assert text.exit_code == 0, text.output
    assert (f"plans that meet them and run from the bf16 checkpoint: {last['gpus']}: {last['meeting_runnable']}"
            in " ".join(text.output.split()))
