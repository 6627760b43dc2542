"""An expert parallelism that does not divide the experts: the engines fill each rank with redundant copies
(EPLB), and autotune plans, predicts and emits that (engines.physical_experts)."""

from __future__ import annotations

import json

import pytest

from autotune.serving.engines import physical_experts, redundant_experts
from tests.test_bad_input import assert_user_error, invoke

GIB = 2**30


@pytest.mark.parametrize("experts, ep, physical, redundant", [
    (256, 72, 288, 32), (256, 24, 264, 8), (256, 36, 288, 32), (256, 8, 256, 0), (256, 256, 256, 0),
    (384, 72, 432, 48), (8, 1, 8, 0), (0, 1, 0, 0)])
def test_copies_fill_every_rank(experts, ep, physical, redundant):
    assert physical_experts(experts, ep) == physical
    assert redundant_experts(experts, ep) == redundant


def _predict(*args: str) -> dict:
    result = invoke("predict", "--workload", "serve", "-m", "deepseek-v3", "--input-len", "1024", "--output-len",
                    "1024", "--concurrency", "256", "--json", *args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)["estimate"]


def test_a_rank_holds_its_share_of_the_copies():
    """DeepSeek-V3 fp8, tp 1: a DEP24 rank holds 264/24 = 11 routed experts per MoE layer, a DEP32 rank 8; the
    rest of the weights are the same, so they differ by 3 experts x 58 MoE layers x 3 x 7168 x 2048 parameters
    of fp8 (one byte, and a 4-byte scale per 128 x 128 block) = 7,662,993,408 x (1 + 4/16384) bytes."""
    dep24 = _predict("-H", "h200-sxm-141gb", "-n", "24", "--plan", "tp=1,dp=24,ep=24,weights=fp8,kv=fp8")
    dep32 = _predict("-H", "h200-sxm-141gb", "-n", "32", "--plan", "tp=1,dp=32,ep=32,weights=fp8,kv=fp8")
    diff = dep24["memory_breakdown_gib"]["weights"] - dep32["memory_breakdown_gib"]["weights"]
    assert diff * GIB == pytest.approx(3 * 58 * 3 * 7168 * 2048 * (1 + 4 / 16384), rel=1e-9)
    assert dep24["fits"] and dep32["fits"]


def test_wide_ep_over_an_nvl72_rack_is_planned():
    """DEP72 in a GB200 NVL72 rack (256 experts + 32 copies) was refused as 'experts not divisible by ep'."""
    estimate = _predict("-H", "gb200-nvl72", "-n", "72", "--plan", "tp=1,dp=72,ep=72,weights=fp8,kv=fp8")
    assert estimate["fits"], estimate.get("infeasible_reason")
    result = invoke("search", "--workload", "serve", "-m", "deepseek-v3", "-H", "gb200-nvl72", "-n", "72",
                    "--input-len", "1024", "--output-len", "1024", "--concurrency", "4096", "--fix", "dp=72",
                    "--fix", "mode=agg", "--json", "-k", "3")
    assert result.exit_code == 0, result.output
    plans = json.loads(result.stdout)["plans"]
    assert plans and any(p["plan"]["ep"] == 72 for p in plans)


def test_emit_balances_the_copies_on_both_engines():
    args = ["--plan", "tp=1,dp=24,ep=24,weights=fp8,kv=fp8,max_batch=1920", "-m", "deepseek-v3", "-H",
            "h200-sxm-141gb", "-n", "24", "--input-len", "1024", "--output-len", "1024", "--checkpoint", "fp8"]
    vllm = invoke("emit", "-f", "vllm", *args)
    assert vllm.exit_code == 0, vllm.output
    assert "--enable-eplb" in vllm.stdout and "--eplb-config '{\"num_redundant_experts\": 8}'" in vllm.stdout
    sglang = invoke("emit", "-f", "sglang", *args)
    assert sglang.exit_code == 0, sglang.output
    assert "--enable-eplb" in sglang.stdout and "--ep-num-redundant-experts 8" in sglang.stdout
    # an ep that divides the experts adds nothing
    even = invoke("emit", "-f", "sglang", *[a.replace("24", "32") for a in args])
    assert even.exit_code == 0 and "eplb" not in even.stdout


def test_an_ep_wider_than_the_experts_is_refused():
    assert_user_error(invoke("emit", "-f", "sglang", "--plan", "tp=1,dp=16,ep=16", "-m", "mixtral-8x7b", "-H",
                             "h100-sxm5-80gb", "-n", "16", "--input-len", "1024", "--output-len", "256"),
                      "ep exceeds the model's experts")
