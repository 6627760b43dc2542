"""MoE training in the cost model (issue 12): NVLink domains, expert parallelism where it sits, folding,
multi-head latent attention and MTP in time and memory, DualPipe, load imbalance and grouped GEMMs."""

from __future__ import annotations

import dataclasses
from math import comb

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from autotune.costmodel import comm
from autotune.costmodel.kernels import GROUPED_GEMM_M_TILE, Kernels
from autotune.inputs.framework import load_framework
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import TrainWorkload
from autotune.training.estimate import estimate_training
from autotune.training.geometry import plan_geometry
from autotune.training.plan import Plan, PlanBatch, parse_plan
from autotune.training.step_time import _Layer, expected_remote_domains, layer_mix

OTHER = load_framework("other")
MEGATRON = load_framework("megatron-lm")
DSV3_WL = TrainWorkload(4096, 15360)
PUBLISHED = "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,precision=fp8"


def estimate(model, hardware, n, plan, workload, framework=MEGATRON, gpn=None):
    hw = load_hardware(hardware) if isinstance(hardware, str) else hardware
    cluster = Cluster(hw, n, gpn or hw.gpus_per_node)
    spec = load_model(model) if isinstance(model, str) else model
    return estimate_training(spec, cluster, workload, PlanBatch.from_plans([parse_plan(plan, n)]), framework).row(0)


def layers_of(model, hardware, n, plan, workload, framework=MEGATRON):
    hw = load_hardware(hardware)
    cluster = Cluster(hw, n, hw.gpus_per_node)
    spec = load_model(model)
    batch = PlanBatch.from_plans([parse_plan(plan, n)])
    geo = plan_geometry(spec, cluster, workload, batch)
    kernels = Kernels(hw, batch.precision == 2, framework.attention, framework.fp8_cast_bytes)
    return {(kind, moe): _Layer(spec, geo, kernels, cluster, workload, moe, framework, kind, batch)
            for _, kind, moe in layer_mix(spec)}


# --- NVLink domains --------------------------------------------------------------------------------

def test_groups_inside_an_nvl72_rack_run_on_nvlink_and_across_racks_on_the_network():
    cluster = Cluster(load_hardware("gb200-nvl72"), 256, 4)
    assert comm.usable_domain(cluster) == 64  # 64 of 72 GPUs per rack when the job does not fill racks
    m = np.array([1e9])
    ep64 = comm.Topology.of(cluster, np.array([64.0]), np.array([1.0]))
    ep128 = comm.Topology.of(cluster, np.array([128.0]), np.array([1.0]))
    assert not ep64.crosses_network[0] and ep64.scale_up[0]
    assert ep128.crosses_network[0]
    inside = comm.all_to_all_s(m, ep64, cluster)[0]
    across = comm.all_to_all_s(m, ep128, cluster)[0]
    # 900 GB/s NVLink against 50 GB/s NICs: the cross-rack all-to-all (half its data leaves the rack)
    # is several times slower.
    assert across > 5 * inside
    # On an 8-GPU HGX node the domain is the node, and nothing changes for groups that fit in it.
    hgx = Cluster(load_hardware("h100-sxm5-80gb"), 64, 8)
    assert comm.usable_domain(hgx) == 8
    old = comm.Topology(np.array([16.0]), np.array([1.0]), 8)
    assert comm.Topology.of(hgx, np.array([16.0]), np.array([1.0])).per_domain[0] == old.per_node[0] == 8


def test_ep_blocks_that_straddle_filled_racks_are_priced_on_the_network():
    """On 288 GB200 GPUs (four full racks) EP32 blocks straddle racks (72 = 2 * 32 + 8): the slowest group has half
    its members in each rack, and its all-to-all pays the NICs, as the launch file's dispatcher choice assumes
    (Cluster.link_tier); EP36 divides the rack and stays on NVLink."""
    full = Cluster(load_hardware("gb200-nvl72"), 288, 4)
    m = np.array([1e9])
    ep32 = comm.Topology.of(full, np.array([32.0]), np.array([1.0]))
    ep36 = comm.Topology.of(full, np.array([36.0]), np.array([1.0]))
    assert ep32.crosses_network[0] and ep32.per_domain[0] == 16 and ep32.domains[0] == 2
    assert not ep36.crosses_network[0]
    assert full.link_tier(32) == "inter_node" and full.link_tier(36) == "scale_up"
    inside = comm.Topology.of(Cluster(load_hardware("gb200-nvl72"), 256, 4), np.array([32.0]), np.array([1.0]))
    assert not inside.crosses_network[0]  # 256 GPUs on four racks: 64 a rack, two whole blocks each
    assert comm.all_to_all_s(m, ep32, full)[0] > 3 * comm.all_to_all_s(m, inside, full)[0]
    # the topology and the link tier (the launch file's dispatcher) agree where the job does not fill its racks
    for n, ep in ((1024, 64), (2048, 64), (256, 32), (288, 32), (288, 36)):
        cluster = Cluster(load_hardware("gb200-nvl72"), n, 4)
        topo = comm.Topology.of(cluster, np.array([float(ep)]), np.array([1.0]))
        assert bool(topo.crosses_network[0]) == (cluster.link_tier(ep) == "inter_node"), (n, ep)


def test_tp8_on_nvl72_is_priced_on_nvlink_not_the_nics():
    wl = TrainWorkload(8192, 256)
    plan = "tp=8,sp=true,zero=1,mbs=1,recompute=full"
    gb200 = estimate("llama3-70b", "gb200-nvl72", 64, plan, wl)["time_breakdown_s"]["tp_comm"]
    tp4 = estimate("llama3-70b", "gb200-nvl72", 64, "tp=4,sp=true,zero=1,mbs=1,recompute=full", wl)
    # TP8 spans two 4-GPU trays of one rack: NVLink, so about what TP4 pays (not 18x more on the NICs).
    assert gb200 < 3 * tp4["time_breakdown_s"]["tp_comm"]


# --- where the EP group sits, and how tokens cross the network --------------------------------------

def test_node_limited_routing_bounds_the_nodes_a_token_reaches():
    dsv3 = load_model("deepseek-v3")
    # 8 groups of 32 experts on 8 nodes, the best 4 groups: exactly 4 nodes, 7/8 of them remote.
    assert expected_remote_domains(dsv3, np.array([8.0]))[0] == pytest.approx(4 * 7 / 8)
    free = dataclasses.replace(dsv3, moe=dataclasses.replace(dsv3.moe, routing_groups=1, routing_group_topk=1))
    unlimited = 8 * (1 - comb(224, 8) / comb(256, 8)) * 7 / 8
    assert expected_remote_domains(free, np.array([8.0]))[0] == pytest.approx(unlimited)
    assert expected_remote_domains(dsv3, np.array([1.0]))[0] == 0.0


def test_deepep_style_dispatch_crosses_the_network_once_per_node():
    dedup = estimate("deepseek-v3", "h800-sxm5-80gb", 2048, PUBLISHED, DSV3_WL, OTHER)
    plain = estimate("deepseek-v3", "h800-sxm5-80gb", 2048, PUBLISHED, DSV3_WL, OTHER.with_traits(ep_dispatch="alltoall"))
    assert dedup["time_breakdown_s"]["ep_comm"] < 0.7 * plain["time_breakdown_s"]["ep_comm"]


def test_folding_keeps_the_expert_group_on_consecutive_ranks():
    # TP2 with etp=1: EP8 spans the TP pairs of one node, so its all-to-all stays on NVLink; with etp=tp
    # the same EP8 is 2 ranks apart and spans two nodes.
    wl = TrainWorkload(4096, 256)
    folded = estimate("qwen3-30b-a3b", "h100-sxm5-80gb", 64, "tp=2,ep=8,etp=1,sp=true,zero=1,mbs=1", wl)
    spread = estimate("qwen3-30b-a3b", "h100-sxm5-80gb", 64, "tp=2,ep=8,sp=true,zero=1,mbs=1", wl)
    assert folded["time_breakdown_s"]["ep_comm"] < spread["time_breakdown_s"]["ep_comm"]
    # Expert TP costs its all-gather and reduce-scatter: none with etp=1.
    assert folded["memory_gib_per_gpu"] != spread["memory_gib_per_gpu"]


def test_megatron_hides_the_all_to_all_only_where_its_overlap_runs():
    wl = TrainWorkload(4096, 1024)
    no_vp = estimate("deepseek-v3", "h100-sxm5-80gb", 1024, "tp=2,pp=8,ep=64,etp=1,sp=true,zero=1,mbs=1,"
                     "recompute=selective,precision=fp8", wl)
    with_vp = estimate("deepseek-v3", "h100-sxm5-80gb", 1024, "tp=2,pp=8,vp=4,ep=64,etp=1,sp=true,zero=1,mbs=1,"
                       "recompute=selective,precision=fp8", wl)
    assert with_vp["time_breakdown_s"]["ep_comm"] < 0.7 * no_vp["time_breakdown_s"]["ep_comm"]


# --- MLA, MTP ------------------------------------------------------------------------------------

def test_mla_runs_its_own_projection_gemms():
    # The weight GEMMs the step time runs carry exactly the FLOPs the FLOP count gives (TP1, EP1).
    spec = load_model("deepseek-v3")
    wl = TrainWorkload(4096, 64)
    layers = layers_of("deepseek-v3", "h800-sxm5-80gb", 64, "tp=1,pp=16,zero=1", wl)
    tokens = 4096.0
    moe = spec.moe
    mlp = 2.0 * 3 * spec.hidden_size * (moe.expert_ffn_hidden_size * moe.top_k + moe.shared_expert_ffn_hidden_size)
    router = 2.0 * spec.hidden_size * moe.n_experts
    expected = spec.attention_projection_flops_of_kind("full") + mlp + router
    assert layers[("full", True)].gemm_flops[0] / tokens == pytest.approx(expected)
    dense = spec.attention_projection_flops_of_kind("full") + 2.0 * 3 * spec.hidden_size * spec.ffn_hidden_size
    assert layers[("full", False)].gemm_flops[0] / tokens == pytest.approx(dense)


def test_mtp_costs_time_and_memory_on_the_last_stage():
    spec = load_model("deepseek-v3")
    without = dataclasses.replace(spec, mtp_layers=0)
    wl = TrainWorkload(4096, 1024)
    plan = "tp=1,pp=16,ep=64,zero=1,mbs=1,recompute=selective,precision=fp8"
    a = estimate(spec, "h800-sxm5-80gb", 1024, plan, wl, OTHER)
    b = estimate(without, "h800-sxm5-80gb", 1024, plan, wl, OTHER)
    assert a["step_time_s"] > b["step_time_s"]
    assert a["memory_breakdown_gib"]["logits"] >= b["memory_breakdown_gib"]["logits"]


def test_mla_up_projection_recompute_shrinks_activations():
    wl = TrainWorkload(4096, 1024)
    plan = "tp=1,pp=16,ep=64,zero=1,mbs=1,precision=fp8"
    none = estimate("deepseek-v3", "h800-sxm5-80gb", 1024, plan + ",recompute=none", wl, OTHER)
    sel = estimate("deepseek-v3", "h800-sxm5-80gb", 1024, plan + ",recompute=selective", wl, OTHER)
    assert sel["memory_breakdown_gib"]["activations"] < 0.85 * none["memory_breakdown_gib"]["activations"]
    assert 0 < sel["time_breakdown_s"]["recompute"] < 0.05 * sel["step_time_s"]


# --- DualPipe ------------------------------------------------------------------------------------------

def test_dualpipe_hides_the_all_to_all_halves_the_bubble_and_holds_two_stages():
    one = estimate("deepseek-v3", "h800-sxm5-80gb", 2048, PUBLISHED, DSV3_WL, OTHER)
    dual = estimate("deepseek-v3", "h800-sxm5-80gb", 2048, PUBLISHED + ",schedule=dualpipe", DSV3_WL, OTHER)
    assert dual["time_breakdown_s"]["ep_comm"] < 0.5 * one["time_breakdown_s"]["ep_comm"]
    assert dual["time_breakdown_s"]["pipeline_bubble"] < 0.6 * one["time_breakdown_s"]["pipeline_bubble"]
    assert dual["time_breakdown_s"]["pp_comm"] == 0.0
    assert dual["memory_breakdown_gib"]["weights"] == pytest.approx(2 * one["memory_breakdown_gib"]["weights"])
    assert dual["tokens_per_s_per_gpu"] > one["tokens_per_s_per_gpu"]


# --- DeepSeek-V3's own pretraining (issue 12) ------------------------------------------------------------

@pytest.mark.parametrize("schedule", ["", ",schedule=dualpipe"])
def test_deepseek_v3_published_layout_within_25_percent(schedule):
    # arXiv 2412.19437: 180K H800 GPU-hours per trillion tokens = 1,543 tokens/s/GPU.
    got = estimate("deepseek-v3", "h800-sxm5-80gb", 2048, PUBLISHED + schedule, DSV3_WL, OTHER)
    assert 0.75 * 1543 <= got["tokens_per_s_per_gpu"] <= 1.25 * 1543


# --- load imbalance and grouped GEMMs --------------------------------------------------------------------

def test_expert_imbalance_slows_the_busiest_rank():
    even = estimate("qwen3-30b-a3b", "h100-sxm5-80gb", 16, "ep=16,zero=1,mbs=1", TrainWorkload(4096, 64))
    hot = estimate("qwen3-30b-a3b", "h100-sxm5-80gb", 16, "ep=16,zero=1,mbs=1",
                   TrainWorkload(4096, 64, moe_imbalance=1.5))
    assert hot["step_time_s"] > even["step_time_s"]
    assert hot["time_breakdown_s"]["ep_comm"] == pytest.approx(1.5 * even["time_breakdown_s"]["ep_comm"], rel=0.05)
    with pytest.raises(ValueError):
        TrainWorkload(4096, 64, moe_imbalance=0.9)


def test_grouped_gemm_pads_each_expert_to_a_tile_and_launches_once():
    k = Kernels(load_hardware("h100-sxm5-80gb"), np.array([False]))
    # 130 tokens per expert cost two whole 128-row tiles, as 256 do (compute-bound at this width).
    few = k.grouped_linear_parts(np.array([130.0]), 8192.0, 8192.0, 16.0)[0]
    tiles = k.grouped_linear_parts(np.array([2 * GROUPED_GEMM_M_TILE]), 8192.0, 8192.0, 16.0)[0]
    assert few[0] == pytest.approx(tiles[0], rel=0.05)
    # One launch, not sixteen: small experts pay the fixed per-GEMM cost once.
    grouped = k.grouped_linear_parts(np.array([GROUPED_GEMM_M_TILE]), 256.0, 256.0, 16.0)[0]
    separate = k.linear_parts(np.array([GROUPED_GEMM_M_TILE]), 256.0, 256.0, 16.0)[0]
    assert grouped[0] < separate[0]


def test_a_plan_string_without_the_new_keys_means_what_it_meant():
    plan = parse_plan("tp=2,pp=2,ep=4,zero=1", 64)
    assert (plan.etp, plan.schedule) == (2, "1f1b")
    assert "etp" not in plan.as_string() and "schedule" not in plan.as_string()
    assert Plan(n_gpus=64, tp=4).etp == 4


def test_per_expert_gemm_launches_cost_what_one_grouped_kernel_saves():
    wl = TrainWorkload(4096, 64)
    plan = "ep=1,zero=3,mbs=1"
    grouped = estimate("qwen3-30b-a3b", "h100-sxm5-80gb", 16, plan, wl, OTHER)
    looped = estimate("qwen3-30b-a3b", "h100-sxm5-80gb", 16, plan, wl, OTHER.with_traits(grouped_gemm="per_expert"))
    # 128 local experts: TransformerEngine's GroupedLinear launches a GEMM per expert (Megatron-Core).
    assert looped["time_breakdown_s"]["compute"] > grouped["time_breakdown_s"]["compute"]
    assert load_framework("megatron-lm").grouped_gemm == "per_expert" and OTHER.grouped_gemm == "single_kernel"


def test_cli_takes_the_imbalance_and_refuses_one_below_the_mean():
    import json
    import subprocess
    import sys

    base = [sys.executable, "-m", "autotune.cli", "predict", "-m", "qwen3-30b-a3b", "-H", "h100-sxm5-80gb",
            "--gpus", "16", "-s", "4096", "-b", "64", "--plan", "ep=16", "--json"]
    even = json.loads(subprocess.run(base, capture_output=True, text=True, check=True).stdout)
    hot = json.loads(subprocess.run(base + ["--moe-imbalance", "1.3"], capture_output=True, text=True,
                                    check=True).stdout)
    assert hot["estimate"]["tokens_per_s_per_gpu"] < even["estimate"]["tokens_per_s_per_gpu"]
    bad = subprocess.run(base + ["--moe-imbalance", "0.5"], capture_output=True, text=True)
    assert bad.returncode != 0 and "--moe-imbalance" in bad.stderr + bad.stdout


def test_a_dropless_moe_block_pays_its_hosts_whole_issue_time():
    wl = TrainWorkload(4096, 512)
    plan = "tp=1,pp=1,ep=8,zero=1,mbs=1,precision=fp8"
    bridge = load_framework("megatron-bridge")
    # Qwen3-30B-A3B, 16 local experts, micro-batch 1 on 8 B200: after the dispatcher's sync the host
    # issues 200 fixed ops and 16 per local expert (TransformerEngine GroupedLinear), 10 us each on an
    # x86 host: 456 ops = 4.56 ms a block and micro-batch, added to the GPU time in full.
    # 512 sequences over 8 data-parallel ranks at micro-batch 1 = 64 micro-batches; 48 MoE blocks.
    hgx = estimate("qwen3-30b-a3b", "b200-sxm-180gb", 8, plan, wl, bridge)
    assert bridge.host_op_us == 10 and bridge.moe_host_ops == 200 and bridge.moe_host_ops_per_expert == 16
    assert hgx["time_breakdown_s"]["host_bound"] == pytest.approx(64 * 48 * 4.56e-3)
    # With a free host, nothing is charged.
    free = bridge.with_traits(host_op_us=0.0)
    assert estimate("qwen3-30b-a3b", "b200-sxm-180gb", 8, plan, wl, free)["time_breakdown_s"]["host_bound"] == 0
    # The hardware's host_op_scale multiplies it (a host issuing each op twice as slowly doubles it).
    gb200 = load_hardware("gb200-nvl72")
    x86 = estimate("qwen3-30b-a3b", dataclasses.replace(gb200, host_op_scale=1.0), 8, plan, wl, bridge)
    slow = estimate("qwen3-30b-a3b", dataclasses.replace(gb200, host_op_scale=2.0), 8, plan, wl, bridge)
    assert slow["time_breakdown_s"]["host_bound"] == pytest.approx(2.0 * x86["time_breakdown_s"]["host_bound"])
    # Full recompute re-runs the forward, and with it the forward's share of the issue time (a third).
    full = estimate("qwen3-30b-a3b", "b200-sxm-180gb", 8, plan + ",recompute=full", wl, bridge)
    assert full["time_breakdown_s"]["host_bound"] == pytest.approx(64 * 48 * 4.56e-3 * 4 / 3)
    # A GPU-heavy block (Mixtral 8x7B: one large local expert under EP8) hides most of it: H * min(1, H/G),
    # with 200 + 16 ops = 2.16 ms issued against well over 10 ms of GPU work a block and micro-batch.
    mix_plan = "tp=1,pp=1,ep=8,zero=1,mbs=1"
    mixtral = estimate("mixtral-8x7b", "h100-sxm5-80gb", 64, mix_plan, TrainWorkload(4096, 1024), bridge)
    full_issue = (1024 / 64) * 32 * 2.16e-3  # micro-batches x MoE blocks x issue time
    assert 0 < mixtral["time_breakdown_s"]["host_bound"] < 0.2 * full_issue
    # Dense models are never charged.
    dense = estimate("llama3-8b", "b200-sxm-180gb", 8, "tp=1,pp=1,zero=1,mbs=1", wl, bridge)
    assert dense["time_breakdown_s"]["host_bound"] == 0


def test_published_bridge_moe_runs_validate_at_the_documented_figure():
    """autotune/data/moe_training_runs.csv (Megatron-Bridge's performance tables): the figure of
    docs/accuracy.md, and the rows a user would check first."""
    from autotune.inputs.hardware import load_hardware as hw
    from autotune.inputs.resources import bundled_data
    from autotune.training.runs import read_runs
    from autotune.training.validation import validate_runs

    report = validate_runs(read_runs(bundled_data("moe_training_runs.csv")), hw)
    assert len(report.rows) == 45 and not report.skipped
    errors = {r.id: r.error_pct for r in report.rows}
    dropless = [e for k, e in errors.items() if not k.endswith("-TD")]
    assert len(dropless) == 37 and sum(map(abs, dropless)) / 37 == pytest.approx(21.5, abs=0.05)
    assert sum(map(abs, errors.values())) / 45 == pytest.approx(21.6, abs=0.05)
    # The same layout with and without the host sync (25.09 token-drop, 25.11 dropless): faster without.
    assert errors["BR25.09-q30-B200-FP8-TD"] == pytest.approx(-0.4, abs=0.1)
    by_id = {r.id: r.predicted_tokens_per_s_per_gpu for r in report.rows}
    assert by_id["BR25.09-q30-B200-FP8-TD"] / by_id["BR25.11-q30-B200-FP8-MX"] == pytest.approx(1.68, abs=0.01)
    # DeepSeek-V3 on 256 GB300 (26.02, MXFP8, PP2 VP8 EP32): within 20 %.
    assert abs(errors["BR26.02-dsv3-GB300-MXFP8"]) < 20
    # The sync-bound case the host model was built for: Qwen3-30B-A3B at micro-batch 1 on 8 B200.
    assert abs(errors["BR25.11-q30-B200-FP8-MX"]) < 20


@settings(max_examples=30, deadline=None, derandomize=True)
@given(host_op_us=st.floats(0.0, 200.0), extra_us=st.floats(0.01, 50.0), mbs=st.sampled_from([1, 2, 4, 8]),
       ep=st.sampled_from([1, 2, 8]), model=st.sampled_from(["qwen3-30b-a3b", "mixtral-8x7b"]))
def test_host_time_is_charged_between_the_floor_and_the_sum(host_op_us, extra_us, mbs, ep, model):
    """Properties of the host model: a slower host never speeds a step up; a dropless block is charged at
    least what a sync-free one is (its issue time beyond the GPU's) and at most the whole issue time; dropping
    at capacity 1 of a force-balanced router is never slower than dropless (EP inside one node, where the
    dropping run's plain all-to-all moves what the dropless one's does)."""
    plan = f"tp=1,pp=1,ep={ep},zero=1,mbs={mbs},precision=bf16"
    bridge = load_framework("megatron-bridge")
    fw, slower = bridge.with_traits(host_op_us=host_op_us), bridge.with_traits(host_op_us=host_op_us + extra_us)
    wl, dropping = TrainWorkload(4096, 512), TrainWorkload(4096, 512, moe_capacity_factor=1.0)
    base = estimate(model, "h100-sxm5-80gb", 8, plan, wl, fw)
    assert estimate(model, "h100-sxm5-80gb", 8, plan, wl, slower)["step_time_s"] >= base["step_time_s"]
    free = estimate(model, "h100-sxm5-80gb", 8, plan, dropping, fw)
    assert free["step_time_s"] <= base["step_time_s"] * (1 + 1e-12)
    assert free["time_breakdown_s"]["host_bound"] <= base["time_breakdown_s"]["host_bound"] + 1e-12
    # at most the whole issue time: blocks x micro-batches x ops x us
    spec = load_model(model)
    ops = bridge.moe_host_ops + bridge.moe_host_ops_per_expert * spec.moe.n_experts / ep
    blocks = spec.n_layers  # every layer of these two models is a MoE block
    whole = blocks * (512 / (8 * mbs)) * ops * host_op_us * 1e-6
    assert base["time_breakdown_s"]["host_bound"] <= whole * (1 + 1e-9) + 1e-12
