"""New hardware (H800, B300, GB200/GB300 NVL72, RTX PRO 6000): the scale-up domain and the link a process
group uses, block-scaled precisions, estimated prices, aliases, and the schema's checks."""

from __future__ import annotations

import dataclasses
import json

import pytest
import yaml

from autotune.errors import InputError
from autotune.inputs.hardware import (
    Cluster,
    hardware_aliases,
    hardware_names,
    load_hardware,
    resolve_hardware_name,
)
from autotune.inputs.modelspec import load_model
from autotune.inputs.resources import bundled_dir

NEW_PROFILES = ["h800-sxm5-80gb", "b300-sxm-288gb", "gb200-nvl72", "gb300-nvl72", "rtx-pro-6000-blackwell"]


def test_new_profiles_are_bundled():
    assert set(NEW_PROFILES) <= set(hardware_names())


def test_h800_is_an_h100_with_a_narrow_nvlink():
    h800, h100 = load_hardware("h800-sxm5-80gb"), load_hardware("h100-sxm5-80gb")
    assert h800.peak_tflops == h100.peak_tflops and h800.memory_gib == h100.memory_gib
    # DeepSeek-V3 §3.2.2: IB 50 GB/s per GPU; NVLink 400 GB/s bidirectional = 200 per direction.
    assert (h800.intra_node.bandwidth_gb_per_s, h800.inter_node.bandwidth_gb_per_s) == (200, 50)
    assert h800.gpus_per_scale_up_domain == 8 and h800.scale_up_link == h800.intra_node


@pytest.mark.parametrize("name", ["gb200-nvl72", "gb300-nvl72"])
def test_nvl72_is_a_72_gpu_domain_of_4_gpu_trays(name):
    hw = load_hardware(name)
    assert (hw.gpus_per_node, hw.gpus_per_scale_up_domain) == (4, 72)
    assert hw.scale_up_link.bandwidth_gb_per_s == hw.intra_node.bandwidth_gb_per_s == 900
    assert hw.inter_node.bandwidth_gb_per_s < hw.scale_up_link.bandwidth_gb_per_s


def test_link_tier_of_groups_on_nvl72():
    cluster = Cluster(load_hardware("gb200-nvl72"), n_gpus=256, gpus_per_node=4)
    assert cluster.n_nodes == 64 and cluster.gpus_per_scale_up_domain == 72 and cluster.n_scale_up_domains == 4
    assert cluster.link_tier(1) == "none" and cluster.link(cluster.link_tier(1)) is None
    assert cluster.link_tier(4) == "intra_node"  # one tray
    assert cluster.link_tier(8) == "scale_up"  # two trays of one rack: NVLink, not the NICs
    assert cluster.link_tier(64) == "scale_up"  # EP64 inside a rack (64 of its 72 GPUs)
    assert cluster.link_tier(8, stride=8) == "scale_up"  # EP8 over TP8 ranks: 64-rank blocks
    assert cluster.link_tier(32, stride=4) == "inter_node"  # 128-rank blocks span racks
    assert cluster.link_tier(128) == "inter_node"
    assert cluster.group_link(64) == load_hardware("gb200-nvl72").scale_up_link
    assert cluster.group_link(128).bandwidth_gb_per_s == 50
    assert cluster.members_per_scale_up_domain(128) == 72 and cluster.members_per_scale_up_domain(8, stride=16) == 4


def test_groups_that_cannot_all_sit_inside_the_racks_a_job_fills_run_on_the_network():
    """288 GB200 GPUs fill four racks: 72 = 2 * 32 + 8, so EP32 blocks straddle racks (four racks hold eight whole
    blocks, 256 GPUs), while blocks that divide the rack (24, 36, 72) or a job with GPUs to spare (256 on four racks,
    64 a rack) stay on NVLink."""
    hw = load_hardware("gb200-nvl72")
    full = Cluster(hw, n_gpus=288, gpus_per_node=4)
    assert full.link_tier(32) == "inter_node" and full.link_tier(8, stride=4) == "inter_node"
    assert [full.link_tier(n) for n in (8, 24, 36, 72)] == ["scale_up"] * 4
    assert Cluster(hw, n_gpus=256, gpus_per_node=4).link_tier(32) == "scale_up"
    assert Cluster(hw, n_gpus=144, gpus_per_node=4).link_tier(16) == "inter_node"  # 72 = 4 * 16 + 8
    # a job that does not fill its racks uses 64 GPUs of each (the cost model's topology reads the same domain):
    # 1024 and 2048 GPUs run EP64 on 16 and 32 racks, inside each
    for n in (1024, 2048):
        big = Cluster(hw, n_gpus=n, gpus_per_node=4)
        assert big.usable_scale_up_domain == 64 and big.link_tier(64) == "scale_up" and big.link_tier(72) == "inter_node"


def test_link_tier_on_hgx_nodes():
    cluster = Cluster(load_hardware("h100-sxm5-80gb"), n_gpus=64, gpus_per_node=8)
    assert cluster.gpus_per_scale_up_domain == 8
    assert [cluster.link_tier(n, s) for n, s in ((8, 1), (4, 2), (16, 1), (2, 8))] == \
        ["intra_node", "intra_node", "inter_node", "inter_node"]
    # A cluster smaller than a node keeps every group inside it.
    assert Cluster(load_hardware("h100-sxm5-80gb"), n_gpus=4, gpus_per_node=4).link_tier(4) == "intra_node"


def test_cluster_can_state_the_domain_a_job_uses():
    hw = load_hardware("gb200-nvl72")
    cluster = Cluster(hw, n_gpus=256, gpus_per_node=4, scale_up_domain_gpus=64)
    assert cluster.n_scale_up_domains == 4 and cluster.link_tier(64) == "scale_up"
    assert cluster.link_tier(128) == "inter_node"
    with pytest.raises(ValueError, match="whole number of nodes"):
        Cluster(hw, n_gpus=256, gpus_per_node=4, scale_up_domain_gpus=66)
    with pytest.raises(ValueError, match="tier must be one of"):
        cluster.link("nvlink")


def test_rtx_pro_6000_has_no_nvlink():
    hw = load_hardware("rtx-pro-6000-blackwell")
    assert hw.intra_node.bandwidth_gb_per_s == 64 and hw.gpus_per_scale_up_domain == hw.gpus_per_node


@pytest.mark.parametrize("name", hardware_names())
def test_an_estimated_price_is_flagged_and_explained(name):
    hw = load_hardware(name)
    says_estimate = hw.sources["price_usd_per_gpu_hour"].startswith("ESTIMATE")
    assert hw.price_estimated == says_estimate
    assert hw.price_usd_per_gpu_hour > 0


def test_estimated_prices_follow_their_documented_method():
    # GB300: GB200's sourced price times the B300/B200 price ratio; RTX PRO 6000: L40S's times the bf16 peak ratio.
    gb200, b300, b200 = (load_hardware(n).price_usd_per_gpu_hour for n in ("gb200-nvl72", "b300-sxm-288gb", "b200-sxm-180gb"))
    assert load_hardware("gb300-nvl72").price_usd_per_gpu_hour == pytest.approx(gb200 * b300 / b200, abs=0.005)
    l40s, rtx = load_hardware("l40s-48gb"), load_hardware("rtx-pro-6000-blackwell")
    assert rtx.price_usd_per_gpu_hour == pytest.approx(
        l40s.price_usd_per_gpu_hour * rtx.peak_tflops["bf16"] / l40s.peak_tflops["bf16"], abs=0.005)


@pytest.mark.parametrize("alias, profile", [
    ("b300", "b300-sxm-288gb"), ("B300_SXM", "b300-sxm-288gb"), ("other: gb200", "gb200-nvl72"),
    ("other: gb300", "gb300-nvl72"), ("h800", "h800-sxm5-80gb"), ("h100_sxm", "h100-sxm5-80gb"),
    ("rtx_pro_6000_server", "rtx-pro-6000-blackwell"), ("gb200-nvl72", "gb200-nvl72"),
])
def test_aliases_resolve(alias, profile):
    assert resolve_hardware_name(alias) == profile
    assert load_hardware(alias).name == profile


def test_every_alias_names_a_bundled_profile():
    assert set(hardware_aliases().values()) <= set(hardware_names())
    assert resolve_hardware_name("no-such-gpu") is None


def _write(tmp_path, name="gb200-nvl72", **changes) -> str:
    data = yaml.safe_load((bundled_dir("hardware") / f"{name}.yaml").read_text())
    for key, value in changes.items():
        if value is None and key != "price_usd_per_gpu_hour":
            data.pop(key, None)
        else:
            data[key] = value
    path = tmp_path / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


@pytest.mark.parametrize("changes, words", [
    ({"scale_up_domain_gpus": 70}, ["scale_up_domain_gpus", "multiple of gpus_per_node"]),
    ({"scale_up_domain_gpus": None}, ["scale_up", "scale_up_domain_gpus"]),
    ({"price_usd_per_gpu_hour": None}, ["price_usd_per_gpu_hour", "price_estimated"]),
    ({"peak_tflops": {"bf16": 2500, "mxfp8": 5000}}, ["peak_tflops.mxfp8", "fp8"]),
    ({"peak_tflops": {"bf16": 2500, "nvfp4": 10000}}, ["peak_tflops.nvfp4", "fp4"]),
])
def test_schema_errors_name_the_field(tmp_path, changes, words):
    with pytest.raises(InputError) as err:
        load_hardware(_write(tmp_path, **changes))
    for word in words:
        assert word in str(err.value)


def test_fingerprint_round_trips_new_spec_and_hardware_fields():
    # A study stores its whole problem; `autotune worker` rebuilds it from that record alone.
    from autotune.inputs.workload import TrainWorkload
    from autotune.search.fingerprint import fingerprint, problem_from_fingerprint
    from autotune.training.problem import OBJECTIVES, TrainingProblem
    from autotune.training.space import load_space

    cluster = Cluster(load_hardware("gb200-nvl72"), n_gpus=256, gpus_per_node=4, scale_up_domain_gpus=64)
    for model in (load_model("deepseek-v3"), load_model("gpt-oss-120b"), load_model("qwen3.5-397b-a17b")):
        problem = TrainingProblem.build(model, cluster, TrainWorkload(4096, 1024), load_space(None))
        record = fingerprint(problem, (OBJECTIVES["throughput"],))
        rebuilt, _ = problem_from_fingerprint(json.loads(json.dumps(record)))
        assert dataclasses.replace(rebuilt.model, description=model.description, source=model.source) == model
        assert rebuilt.cluster.hardware.scale_up_link == cluster.hardware.scale_up_link
        assert rebuilt.cluster.gpus_per_scale_up_domain == 64
        assert fingerprint(rebuilt, (OBJECTIVES["throughput"],)) == record


def test_a_study_recorded_before_profiles_stated_their_compute_capability_goes_on():
    """compute_capability picks a launch flag only (TransformerEngine's fp8 recipe); a study whose record lacks it
    is the same problem, so `search --study` continues it rather than refusing it as another problem."""
    from autotune.inputs.workload import TrainWorkload
    from autotune.search.fingerprint import check_same_problem, fingerprint
    from autotune.training.problem import OBJECTIVES, TrainingProblem
    from autotune.training.space import load_space

    cluster = Cluster(load_hardware("h100-sxm5-80gb"), n_gpus=8, gpus_per_node=8)
    problem = TrainingProblem.build(load_model("llama3-8b"), cluster, TrainWorkload(4096, 64), load_space(None))
    record = fingerprint(problem, (OBJECTIVES["throughput"],))
    assert cluster.hardware.compute_capability == 9.0 and "compute_capability" not in record["hardware"]
    # a record from before profiles stated it has no such key (this one); one from the release that stored it has
    # it: both are the same problem
    stored_it = json.loads(json.dumps(record))
    stored_it["hardware"]["compute_capability"] = 9.0
    for older in (json.loads(json.dumps(record)), stored_it):
        check_same_problem(older, record, study="s")  # no error
    other = json.loads(json.dumps(record))
    other["hardware"]["memory_gib"] = 40.0
    with pytest.raises(InputError, match="hardware.memory_gib"):  # what an estimate reads still counts
        check_same_problem(other, record, study="s")


def test_a_study_recorded_before_specs_stated_their_rope_and_router_goes_on():
    """rope_theta, rope_scaling, qk_layernorm and the router's score function, bias and scaling are launch flags
    only: a study whose record lacks them (made before the specs stated them) is the same problem."""
    from autotune.inputs.workload import TrainWorkload
    from autotune.search.fingerprint import check_same_problem, fingerprint
    from autotune.training.problem import OBJECTIVES, TrainingProblem
    from autotune.training.space import load_space

    cluster = Cluster(load_hardware("h100-sxm5-80gb"), n_gpus=64, gpus_per_node=8)
    problem = TrainingProblem.build(load_model("deepseek-v3"), cluster, TrainWorkload(4096, 512), load_space(None))
    record = fingerprint(problem, (OBJECTIVES["throughput"],))
    assert record["model"]["rope_theta"] == 10000.0 and record["model"]["moe"]["router_score"] == "sigmoid"
    older = json.loads(json.dumps(record))  # as a release before the specs stated them stored it
    for key in ("rope_theta", "rope_scaling"):
        del older["model"][key]
    for key in ("router_score", "router_expert_bias", "router_topk_scaling"):
        del older["model"]["moe"][key]
    check_same_problem(older, record, study="s")  # no error
    other = json.loads(json.dumps(record))
    other["model"]["moe"]["top_k"] = 6
    with pytest.raises(InputError, match="model.moe.top_k"):  # what an estimate reads still counts
        check_same_problem(other, record, study="s")


def test_explain_model_of_a_plans_json_written_before_the_rope_fields_is_the_same_model(tmp_path):
    """A plans.json whose embedded spec predates rope_theta, explained with --model of the same bundled model, is
    not said to be another model (the launch-only fields are not what the plans were ranked by)."""
    from typer.testing import CliRunner

    from autotune.cli import app

    runner = CliRunner()
    out = tmp_path / "s"
    made = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b",
                               "16", "--out", str(out)])
    assert made.exit_code == 0, made.output
    doc = json.loads((out / "plans.json").read_text())
    assert doc["inputs"]["model_spec"].pop("rope_theta") == 500000.0
    (out / "plans.json").write_text(json.dumps(doc))
    result = runner.invoke(app, ["explain", str(out), "--rank", "1", "--model", "llama3-8b"])
    assert result.exit_code == 0, result.output
    assert "did not rank" not in " ".join(result.output.split())
