"""Under a request rate, a request waits for one of the engine's sequence slots (its batch limit): a limit just above
the mean in flight is not free.  A review found a disaggregated Llama-3.1-70B plan at 8 requests/s (61 sequences in
flight on average) predicted at 628 ms TTFT with max_batch 61 or 64 and unbounded at 60, and the capacity search
picking it with batch 64 as the fewest GPUs; Poisson arrivals through 64 slots at that occupancy wait seconds."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.serving.estimate import _wq_gdc

runner = CliRunner()
PLAN = "prefill_workers=2,prefill_tp=2,decode_workers=1,decode_tp=1,weights=int4,kv=fp8,max_batch={}"
ARGS = ["--workload", "serve", "-m", "llama3.1-70b", "-H", "h100-sxm5-80gb", "--gpus", "5", "--checkpoint", "awq",
        "--input-len", "2048", "--output-len", "256", "--request-rate", "8", "--json"]


def ttft_ms(batch: int) -> float | None:
    result = runner.invoke(app, ["predict", *ARGS, "-p", PLAN.format(batch)])
    assert result.exit_code in (0, 1), result.output
    return json.loads(result.stdout)["estimate"]["ttft_ms"]


def test_the_slots_are_a_g_d_c_queue():
    # c = 1: M/D/1's rho S / (2 (1 - rho)); Sakasegawa's exponent sqrt(2(c+1)) - 1 for c slots
    assert _wq_gdc(1.0, 0.5, 1.0, 1.0) == pytest.approx(0.5)
    assert _wq_gdc(10.0, 0.95, 64.0, 1.0) == pytest.approx(0.5 * 0.95 ** (130 ** 0.5 - 1) / (64 * 0.05) * 10.0)
    # the estimate's comment: 61 in flight through 64 slots wait a tenth of a residency (not half of one)
    assert _wq_gdc(1.0, 61 / 64, 64.0, 1.0) == pytest.approx(0.101, abs=0.001)


def test_a_batch_limit_just_above_the_load_costs_waiting():
    near, roomy, wide = ttft_ms(64), ttft_ms(80), ttft_ms(256)
    assert ttft_ms(61) is None  # 61 slots cannot hold the ~62 requests a prefill and 255 steps keep in flight
    assert near > roomy + 500.0  # 64 slots at ~97% occupancy: more than half a second of waiting
    assert roomy > wide and roomy < wide * 1.05  # 80 slots: the wait has all but gone
    assert ttft_ms(70) > roomy  # and it falls as the limit grows
