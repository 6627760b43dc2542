"""Two reviewed defects of the training memory/time model, pinned with hand-checked numbers.

1. fp8 plans under Megatron-LM keep TransformerEngine's cached fp8 weight copies (row-wise and
   transposed, 1 + 1 bytes per local GEMM weight) beside the bf16 weights; frameworks whose
   parameters are fp8 themselves (NeMo, Megatron-Bridge recipes) or that cache nothing
   (torchtitan's torchao Float8) add nothing, and neither does ZeRO-3.
2. torchtitan's ZeRO-2 (FSDP2, reshard_after_forward=False) without pipeline parallelism
   reduce-scatters every micro-batch into the fp32 shard and re-gathers the weights for the next
   one; only torch.distributed.pipelining accumulates unsharded fp32 gradients.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from autotune.errors import InputError
from autotune.inputs.framework import load_framework, load_profile
from autotune.inputs.workload import TrainWorkload
from tests.test_modelling_fixes import estimate

GIB = 2.0**30
PROFILE_DIR = Path(__file__).resolve().parent.parent / "profiles" / "frameworks"


def _weights_gib(framework: str, precision: str, **plan) -> float:
    # ZeRO-0 unless stated: Megatron's distributed optimizer (ZeRO-1) holds fp8 parameters (--fp8-param-gather)
    fields = dict(tp=8, zero=0, mbs=1, precision=precision, recompute="full")
    fields.update(plan)
    row = estimate("llama3.1-70b", "h100-sxm5-80gb", 64, fields, TrainWorkload(8192, 512), load_framework(framework))
    return row["memory_breakdown_gib"]["weights"]


# --- 1. fp8 weight copies -------------------------------------------------------------------------------------


def test_megatron_fp8_keeps_two_bytes_per_local_gemm_weight_beside_the_bf16_weights():
    # Llama-3.1-70B layer GEMMs: q and o 8192x8192 each, k and v 8192x1024 each, SwiGLU 3 x 8192x28672:
    # 134,217,728 + 16,777,216 + 704,643,072 = 855,638,016 = 816 Mi parameters (norms and embeddings apart).
    # TP8 leaves 102 Mi per GPU and layer; 80 layers x 102 Mi x 2 bytes = 16,320 MiB = 15.9375 GiB.
    extra = _weights_gib("megatron-lm", "fp8") - _weights_gib("megatron-lm", "bf16")
    assert extra == pytest.approx(15.9375, rel=1e-9)
    # The bf16 weights themselves: 2 bytes x (80 x (102 Mi + 2 x 8192 / 8 of the norms) + 2 x 128256 x 8192 / 8 of
    # the embedding and the output layer) = 16.43 GiB, the figure the review saw for fp8 as for bf16.
    bf16 = 2 * (80 * (102 * 2**20 + 2048) + 2 * 128256 * 1024) / GIB
    assert _weights_gib("megatron-lm", "bf16") == pytest.approx(bf16, rel=1e-12)


@pytest.mark.parametrize("framework", ["torchtitan", "nemo", "megatron-bridge"])
def test_frameworks_without_extra_fp8_copies_keep_the_bf16_figure(framework):
    # torchao Float8Linear casts anew every GEMM; NeMo's and Bridge's fp8 recipes hold the parameters in fp8
    # (fp8_param_gather), their row-wise and transposed copies taking the bf16 weights' place.
    plan = {"sp": True} if framework == "torchtitan" else {}
    assert _weights_gib(framework, "fp8", **plan) == pytest.approx(_weights_gib(framework, "bf16", **plan), rel=1e-12)


def test_no_fp8_copies_under_zero3_nor_before_megatron_core_cached_them():
    # ZeRO-3's frameworks drop a unit's fp8 copies with its gathered weights (TransformerEngine PR #1648).
    assert _weights_gib("megatron-lm", "fp8", pp=1) - _weights_gib("megatron-lm", "bf16", pp=1) > 15.0
    zero3 = dict(zero=3)
    fw = load_framework("megatron-lm")
    wl = TrainWorkload(8192, 512)
    fp8 = estimate("llama3.1-70b", "h100-sxm5-80gb", 64, dict(tp=8, mbs=1, precision="fp8", **zero3), wl, fw)
    bf16 = estimate("llama3.1-70b", "h100-sxm5-80gb", 64, dict(tp=8, mbs=1, precision="bf16", **zero3), wl, fw)
    assert fp8["memory_breakdown_gib"]["weights"] == pytest.approx(bf16["memory_breakdown_gib"]["weights"], rel=1e-12)
    # Megatron-Core passed no is_first_microbatch to TE before 2024 (NVIDIA/Megatron-LM issue #629, 2023-12).
    assert load_framework("megatron-lm@2023-12").fp8_weight_cache_bytes == 0.0
    assert load_framework("megatron-lm@2024-02").fp8_weight_cache_bytes == 2.0


def test_moe_fp8_copies_cover_the_local_experts_but_not_router_or_norms():
    # Mixtral-8x7B, EP8 on 8 GPUs: per layer the attention GEMMs 4096 x (4096 + 2x1024 + 4096) = 40 Mi and one
    # local expert 3 x 4096 x 14336 = 168 Mi; the router (4096 x 8) and the two norms keep no fp8 copy.
    # 32 layers x 208 Mi x 2 bytes = 13,312 MiB = 13.0 GiB.
    fw = load_framework("megatron-lm")
    wl = TrainWorkload(4096, 64)
    plan = dict(ep=8, zero=0, mbs=1, recompute="full")
    fp8 = estimate("mixtral-8x7b", "h100-sxm5-80gb", 8, {**plan, "precision": "fp8"}, wl, fw)
    bf16 = estimate("mixtral-8x7b", "h100-sxm5-80gb", 8, {**plan, "precision": "bf16"}, wl, fw)
    extra = fp8["memory_breakdown_gib"]["weights"] - bf16["memory_breakdown_gib"]["weights"]
    assert extra == pytest.approx(13.0, rel=1e-9)


def test_a_profile_may_leave_the_new_trait_out_but_not_give_it_out_of_range(tmp_path):
    data = yaml.safe_load((PROFILE_DIR / "other.yaml").read_text())
    del data["traits"]["fp8_weight_cache_bytes"], data["sources"]["fp8_weight_cache_bytes"]
    path = tmp_path / "fw.yaml"
    path.write_text(yaml.safe_dump(data))
    newest = load_profile(str(path)).at()
    assert newest.fp8_weight_cache_bytes == 0.0 and "default" in newest.sources["fp8_weight_cache_bytes"]
    data["traits"]["fp8_weight_cache_bytes"] = 9.0
    data["sources"]["fp8_weight_cache_bytes"] = "a typo"
    path.write_text(yaml.safe_dump(data))
    with pytest.raises(InputError, match="fp8_weight_cache_bytes"):
        load_profile(str(path))


# --- 2. torchtitan ZeRO-2 -------------------------------------------------------------------------------------


TORCHTITAN = load_framework("torchtitan")


def test_torchtitan_zero2_without_pp_keeps_sharded_fp32_gradients():
    # The review's case: Llama-3.1-8B on 8 H100, 64 sequences of 8192, micro-batch 1 (8 micro-batches).  Its
    # 8,030,261,248 parameters less the final norm's 4096 (not counted in the stages) = 8,030,257,152; each
    # micro-batch is reduce-scattered into the fp32 shard: 4 bytes x 8,030,257,152 / 8 = 3.739 GiB (it was
    # 27.96 GiB, the unsharded fp32 accumulation, and the plan did not fit).
    row = estimate("llama3.1-8b", "h100-sxm5-80gb", 8, dict(zero=2, mbs=1, recompute="selective"),
                   TrainWorkload(8192, 64), TORCHTITAN)
    assert row["memory_breakdown_gib"]["gradients"] == pytest.approx(4 * 8_030_257_152 / 8 / GIB, rel=1e-9)
    assert row["fits"]


def test_torchtitan_zero2_under_pp_still_accumulates_unsharded_fp32_gradients():
    # torch.distributed.pipelining turns gradient sync off until the last backward: the first of two stages
    # holds 16 layers (4096x6144 QKV + 4096x4096 o + 3 x 4096x14336 + 2 x 4096 norms = 218,112,000 each) and the
    # embedding (128256 x 4096 = 525,336,576) in fp32: 4 x 4,015,128,576 bytes = 14.958 GiB.
    row = estimate("llama3.1-8b", "h100-sxm5-80gb", 8, dict(pp=2, zero=2, mbs=1, recompute="selective"),
                   TrainWorkload(8192, 64), TORCHTITAN)
    assert row["memory_breakdown_gib"]["gradients"] == pytest.approx(4 * 4_015_128_576 / GIB, rel=1e-9)


def test_torchtitan_zero2_without_pp_pays_its_collectives_every_microbatch():
    # 64 GPUs on 8 nodes, short sequences so the collectives show: with one micro-batch the step gathers
    # the weights and reduce-scatters the gradients once; with eight it does both eight times (FSDP2 reshards
    # after each backward, FSDPParamGroup.reshard_after_backward), so the exposed DP time is exactly 8x.
    plan = dict(zero=2, mbs=1, recompute="selective")
    one = estimate("llama3.1-8b", "h100-sxm5-80gb", 64, plan, TrainWorkload(1024, 64), TORCHTITAN)
    eight = estimate("llama3.1-8b", "h100-sxm5-80gb", 64, plan, TrainWorkload(1024, 512), TORCHTITAN)
    assert one["time_breakdown_s"]["dp_comm"] > 0.0
    assert eight["time_breakdown_s"]["dp_comm"] == pytest.approx(8 * one["time_breakdown_s"]["dp_comm"], rel=1e-9)
    # DeepSpeed-style ZeRO-2 (weights kept whole) reduces every micro-batch but gathers once a step.
    deepspeed_like = TORCHTITAN.with_traits(zero2="reduce_per_microbatch")
    ds_one = estimate("llama3.1-8b", "h100-sxm5-80gb", 64, plan, TrainWorkload(1024, 64), deepspeed_like)
    ds_eight = estimate("llama3.1-8b", "h100-sxm5-80gb", 64, plan, TrainWorkload(1024, 512), deepspeed_like)
    assert ds_one["time_breakdown_s"]["dp_comm"] == pytest.approx(one["time_breakdown_s"]["dp_comm"], rel=1e-9)
    assert ds_one["time_breakdown_s"]["dp_comm"] < ds_eight["time_breakdown_s"]["dp_comm"] < eight["time_breakdown_s"]["dp_comm"]


def test_megatron_fp8_parameters_under_the_distributed_optimizer_add_no_copies():
    """With --fp8-param-gather (Megatron-Core 0.8, 2024-07; the launch files pass it at ZeRO-1) the parameters are fp8
    and TE's copies take the bf16 weights' place: a published 405B fp8 run (MLM-LLAMAEX-3) read 27.8% low when the
    copies were counted beside them.  At ZeRO-0 Megatron refuses the flag and the copies stay."""
    from autotune.outputs.emit import megatron
    from autotune.inputs.hardware import load_hardware
    from autotune.training.plan import Plan

    assert _weights_gib("megatron-lm", "fp8", zero=1) == pytest.approx(_weights_gib("megatron-lm", "bf16", zero=1))
    assert _weights_gib("megatron-lm", "fp8", zero=0) - _weights_gib("megatron-lm", "bf16", zero=0) > 15.0
    assert not load_framework("megatron-lm@2024-06").fp8_param_gather and load_framework("megatron-lm").fp8_param_gather
    h100 = load_hardware("h100-sxm5-80gb")
    assert ("--fp8-param-gather",) in megatron.precision_args(Plan(n_gpus=64, tp=8, zero=1, precision="fp8"), h100)
    assert ("--fp8-param-gather",) not in megatron.precision_args(Plan(n_gpus=64, tp=8, zero=0, precision="fp8"), h100)
