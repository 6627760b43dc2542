"""The modelling errors of issue 11, each pinned by the behaviour an expert expects.

Pipelines with fewer micro-batches than stages; communication priced on the link a group uses,
with overlap bounded per link and per framework; GPUs of one calibration method; selective
recompute as each framework emits it; fp8 only when asked; equal estimates collapsed; the
memory headroom of ranked plans.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.inputs.framework import load_framework
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import load_model
from autotune.inputs.workload import TrainWorkload
from autotune.search import run_search
from autotune.training.estimate import estimate_training
from autotune.training.plan import Plan, PlanBatch
from autotune.training.problem import OBJECTIVES, TrainingProblem
from autotune.training.space import PERMISSIVE_RULES, load_space, rejection_reasons
from autotune.training.step_time import pipeline_passes

MEGATRON = load_framework("megatron-lm")


def estimate(model, hardware, n, plan_fields, workload, framework=MEGATRON, gpn=8):
    cluster = Cluster(load_hardware(hardware) if isinstance(hardware, str) else hardware, n, gpn)
    plan = Plan(n_gpus=n, **plan_fields)
    return estimate_training(load_model(model) if isinstance(model, str) else model, cluster, workload,
                             PlanBatch.from_plans([plan]), framework).row(0)


# --- pipeline: fewer micro-batches than stages, interleaving constraints -------------------------------


def test_interleaving_cannot_shrink_the_bubble_below_one_pass_per_stage():
    m, p = np.array([2.0]), np.array([8.0])
    one, four = pipeline_passes(m, p, np.array([1.0])), pipeline_passes(m, p, np.array([4.0]))
    assert one[0] == 9.0  # m + p - 1
    assert four[0] == pytest.approx(8.25)  # p + (m-1)/v: the first micro-batch's path through all v*p chunks
    # With many micro-batches the familiar (p-1)/(v*m) bubble holds.
    assert pipeline_passes(np.array([64.0]), p, np.array([4.0]))[0] == pytest.approx(64 + 7 / 4)


def test_two_microbatches_on_eight_stages_gain_little_from_interleaving():
    # The case: vp=4 was 2.2x faster than vp=1 at 2 micro-batches on 8 stages.  torch's
    # pipelining (no micro-batch divisibility rule in this check: the generic framework) gets at most
    # the ratio of pipeline passes, 9 / 8.25.
    fw = load_framework("other").with_traits(interleave_microbatches_multiple_of_pp=False)
    wl = TrainWorkload(8192, 16)
    base = dict(tp=8, pp=8, sp=True, zero=1, mbs=1, recompute="full")
    one = estimate("llama3-70b", "h100-sxm5-80gb", 512, {**base, "vp": 1}, wl, fw)
    four = estimate("llama3-70b", "h100-sxm5-80gb", 512, {**base, "vp": 4}, wl, fw)
    assert 1.0 < one["step_time_s"] / four["step_time_s"] < 9 / 8.25 + 0.01


def test_megatron_refuses_an_interleaved_plan_whose_microbatches_do_not_divide_by_pp():
    # 131k-context plan with 2 micro-batches on 8 stages: Megatron-Core raises at launch.
    model, cluster = load_model("llama3-70b"), Cluster(load_hardware("h100-sxm5-80gb"), 512, 8)
    plan = PlanBatch.from_plans([Plan(n_gpus=512, tp=8, pp=8, vp=4, cp=4, sp=True, zero=1, mbs=1)])
    reason = rejection_reasons(model, cluster, TrainWorkload(131072, 4), plan, PERMISSIVE_RULES, framework=MEGATRON)
    from autotune.training.space import REASONS

    assert REASONS[int(reason[0])] == "interleaved schedule needs the micro-batches to be a multiple of pp"


# --- communication on the link a group uses ------------------------------------------------------------


def test_tp16_across_two_nodes_is_slower_than_tp8():
    wl = TrainWorkload(2048, 64)
    tp16 = estimate("gpt3-175b", "h100-sxm5-80gb", 32, dict(tp=16, pp=2, sp=True, zero=1, mbs=1, recompute="full"),
                    wl)
    tp8 = estimate("gpt3-175b", "h100-sxm5-80gb", 32, dict(tp=8, pp=4, sp=True, zero=1, mbs=1, recompute="full"), wl)
    assert tp16["time_breakdown_s"]["tp_comm"] > 5 * tp8["time_breakdown_s"]["tp_comm"]
    assert tp16["tokens_per_s_per_gpu"] < tp8["tokens_per_s_per_gpu"]


def test_overlap_is_bounded_per_link_and_per_framework():
    wl = TrainWorkload(2048, 64)
    plan = dict(tp=16, pp=2, sp=True, zero=1, mbs=1, recompute="full")
    # TE userbuffers hide TP communication inside the NVLink domain only: across nodes nothing is hidden.
    hidden = MEGATRON.with_traits(tp_overlap_network=0.9)
    exposed = estimate("gpt3-175b", "h100-sxm5-80gb", 32, plan, wl)["time_breakdown_s"]["tp_comm"]
    if_hidden = estimate("gpt3-175b", "h100-sxm5-80gb", 32, plan, wl, hidden)["time_breakdown_s"]["tp_comm"]
    assert if_hidden < exposed
    # Never more than the compute beside it: a collective longer than the GEMMs is exposed by the difference.
    from autotune.training.step_time import exposed, exposed_behind

    assert exposed(np.array([3.0]), 1.0, np.array([1.0]))[0] == 2.0
    assert exposed(np.array([3.0]), 0.5, np.array([10.0]))[0] == 1.5
    assert exposed_behind(np.array([3.0]), 0.8, np.array([1.0]))[0] == pytest.approx(2.2)


def test_cross_node_expert_all_to_all_runs_on_the_network_and_overlaps_where_the_framework_does():
    from autotune.training.step_time import OVERLAPPED_A2A_SM_SHARE

    wl = TrainWorkload(4096, 64)
    plan8 = dict(tp=1, ep=8, zero=1, mbs=1, recompute="selective")
    inside = estimate("mixtral-8x7b", "h100-sxm5-80gb", 16, plan8, wl)["time_breakdown_s"]["ep_comm"]
    across = estimate("mixtral-8x7b", "h100-sxm5-80gb", 16, plan8, wl, gpn=4)["time_breakdown_s"]["ep_comm"]
    assert across > inside > 0
    # Megatron-Core's batch-level EP overlap (2025-09) hides half (the hidden half still takes SMs from
    # the compute beside it); before it, all of it is exposed.  Same dispatcher in both.
    newest = load_framework("megatron-lm").with_traits(ep_dispatch="alltoall")
    hidden = estimate("mixtral-8x7b", "h100-sxm5-80gb", 16, plan8, wl, newest, gpn=4)["time_breakdown_s"]["ep_comm"]
    old = estimate("mixtral-8x7b", "h100-sxm5-80gb", 16, plan8, wl, load_framework("megatron-lm@2025-06"), gpn=4)
    tax = OVERLAPPED_A2A_SM_SHARE / (1 - OVERLAPPED_A2A_SM_SHARE)
    assert hidden == pytest.approx((0.5 + 0.5 * tax) * old["time_breakdown_s"]["ep_comm"])
    # The overlap needs no full recompute (Megatron-Core TransformerConfig): with it, nothing is hidden.
    full = dict(plan8, recompute="full")
    assert (estimate("mixtral-8x7b", "h100-sxm5-80gb", 16, full, wl, newest, gpn=4)["time_breakdown_s"]["ep_comm"]
            == pytest.approx(estimate("mixtral-8x7b", "h100-sxm5-80gb", 16, full, wl,
                                      load_framework("megatron-lm@2025-06"), gpn=4)["time_breakdown_s"]["ep_comm"]))
    # A DeepEP-style dispatcher sends a token once per destination node: less over the network.
    assert across < hidden


def test_no_gpu_communicates_slower_than_an_older_one_on_a_slower_link():
    wl = TrainWorkload(8192, 64)
    plan = dict(tp=8, sp=True, zero=1, mbs=1, recompute="full")
    tp = {gpu: estimate("llama3-70b", gpu, 64, plan, wl)["time_breakdown_s"]["tp_comm"]
          for gpu in ("a100-sxm4-80gb", "h100-sxm5-80gb", "h200-sxm-141gb", "b200-sxm-180gb")}
    assert tp["b200-sxm-180gb"] <= tp["h100-sxm5-80gb"] <= tp["a100-sxm4-80gb"]
    assert tp["h200-sxm-141gb"] == pytest.approx(tp["h100-sxm5-80gb"])


# --- selective recompute as the framework emits it --------------------------------------------------------


def test_selective_recompute_is_priced_per_framework():
    wl = TrainWorkload(8192, 64)
    plan = dict(tp=1, zero=3, mbs=1)
    runs = {}
    for name in ("megatron-lm", "torchtitan"):
        fw = load_framework(name)
        runs[name] = {r: estimate("llama3-8b", "h100-sxm5-80gb", 8, {**plan, "recompute": r}, wl, fw)
                      for r in ("none", "selective")}
    mega, titan = runs["megatron-lm"], runs["torchtitan"]
    # Megatron's selective re-runs the attention core; under flash attention it keeps what `none` keeps.
    assert mega["selective"]["memory_gib_per_gpu"] == pytest.approx(mega["none"]["memory_gib_per_gpu"])
    assert 0 < mega["selective"]["time_breakdown_s"]["recompute"] < 0.2 * mega["none"]["step_time_s"]
    # torchtitan's op-level SAC keeps about half the matmul outputs and re-runs the rest.
    assert titan["selective"]["memory_gib_per_gpu"] < titan["none"]["memory_gib_per_gpu"]
    assert titan["selective"]["time_breakdown_s"]["recompute"] > mega["selective"]["time_breakdown_s"]["recompute"]


# --- fp8 never silent; MFU against the plan's precision -----------------------------------------------------


def test_the_readme_search_plans_bf16_unless_asked_and_says_so():
    command = ["search", "--model", "llama3-70b", "--hardware", "h100-sxm5-80gb", "--gpus", "64", "--seq-len", "8192",
               "--global-batch", "512", "--top", "5"]
    plain = CliRunner().invoke(app, command + ["--json"])
    assert plain.exit_code == 0, plain.output
    doc = json.loads(plain.stdout)
    assert {p["plan"]["precision"] for p in doc["plans"]} == {"bf16"}
    assert doc["inputs"]["precisions"] == ["bf16"]
    assert all(p["estimate"]["mfu_peak"] == "bf16" for p in doc["plans"])
    text = CliRunner().invoke(app, command)
    assert "precision searched: bf16 (add --precision bf16,fp8 to search fp8)" in text.stdout
    both = CliRunner().invoke(app, command + ["--precision", "bf16,fp8", "--json"])
    assert json.loads(both.stdout)["inputs"]["precisions"] == ["bf16", "fp8"]


def test_fp8_mfu_is_against_the_fp8_peak():
    wl = TrainWorkload(8192, 64)
    plan = dict(tp=8, sp=True, zero=1, mbs=1, recompute="full")
    bf16 = estimate("llama3-70b", "h100-sxm5-80gb", 64, {**plan, "precision": "bf16"}, wl)
    fp8 = estimate("llama3-70b", "h100-sxm5-80gb", 64, {**plan, "precision": "fp8"}, wl)
    assert (bf16["mfu_peak"], fp8["mfu_peak"]) == ("bf16", "fp8")
    peak = load_hardware("h100-sxm5-80gb").peak_tflops
    assert fp8["mfu"] == pytest.approx(fp8["tflops_per_gpu"] / peak["fp8"])
    assert bf16["mfu"] == pytest.approx(bf16["tflops_per_gpu"] / peak["bf16"])


# --- equal estimates collapse; the headroom ------------------------------------------------------------------


@pytest.fixture(scope="module")
def seventy_b():
    problem = TrainingProblem.build(load_model("llama3-70b"), Cluster(load_hardware("h100-sxm5-80gb"), 64, 8),
                                    TrainWorkload(8192, 512), load_space(None))
    return problem, run_search(problem, (OBJECTIVES["throughput"],), sampler="exact", top=10)


def test_plans_with_identical_estimates_collapse_into_one_row(seventy_b):
    _, result = seventy_b
    keys = [(round(r.estimate["step_time_s"], 9), round(r.estimate["memory_gib_per_gpu"], 9)) for r in result.ranked]
    assert len(keys) == len(set(keys)) == 10
    # TP8 on 8 GPUs leaves one data-parallel rank: ZeRO 0-3 shard nothing, so they are one answer,
    # shown once as the simplest (ZeRO-0) with the others named.
    from autotune.search.result import simplicity

    problem = TrainingProblem.build(load_model("llama3-8b"), Cluster(load_hardware("h100-sxm5-80gb"), 8, 8),
                                    TrainWorkload(4096, 16), load_space(None).fixed({"tp": 8, "offload": "none"}))
    ranked = run_search(problem, (OBJECTIVES["throughput"],), sampler="exact", top=5).ranked
    assert ranked[0].plan.zero == 0
    assert sorted(p.zero for p in ranked[0].equivalents) == [1, 2, 3]
    assert all(simplicity(r.plan) <= simplicity(p) for r in ranked for p in r.equivalents)
    assert [p["zero"] for p in ranked[0].to_json()["equivalents"]] == [p.zero for p in ranked[0].equivalents]
    keys = [(r.estimate["step_time_s"], r.estimate["memory_gib_per_gpu"]) for r in ranked]
    assert len(set(keys)) == len(keys)


def test_ranked_plans_keep_the_memory_headroom_free(seventy_b):
    problem, result = seventy_b
    assert problem.memory_headroom == 0.03
    capacity = problem.cluster.hardware.memory_gib
    assert all(r.estimate["memory_gib_per_gpu"] <= 0.97 * capacity for r in result.ranked)
