"""Every validity rule of the search space, exercised by a plan that breaks exactly it;
and the space YAML loader's errors."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from autotune.errors import InputError
from autotune.inputs.framework import load_framework
from autotune.inputs.hardware import Cluster, load_hardware
from autotune.inputs.modelspec import ModelSpec, load_model
from autotune.inputs.workload import TrainWorkload
from autotune.training import space as space_mod
from autotune.training.plan import PLAN_DEFAULTS, PLAN_KEYS, PlanBatch
from autotune.training.space import (
    PERMISSIVE_RULES,
    REASONS,
    Rules,
    axis_choices,
    enumerate_valid,
    load_space,
    rejection_reasons,
)

H100 = load_hardware("h100-sxm5-80gb")
A100 = load_hardware("a100-sxm4-80gb")
B200 = load_hardware("b200-sxm-180gb")
LLAMA8 = load_model("llama3-8b")  # 32 layers, 32 heads, 8 KV heads, dense
MIXTRAL = load_model("mixtral-8x7b")  # 8 experts, 32 heads, 8 KV heads
GPT3 = load_model("gpt3-175b")  # 96 heads, 96 KV heads, 96 layers
MINIMAX = load_model("minimax-m2.5")  # 62 layers + 3 MTP modules, 256 experts
# 24 query heads and 4 KV heads: tp=8 divides the heads but not the KV heads.
GQA_TOY = ModelSpec(name="gqa-toy", n_layers=8, hidden_size=3072, ffn_hidden_size=8192, n_heads=24, n_kv_heads=4,
                    head_dim=128, vocab_size=32000)

WL = TrainWorkload(seq_len=8192, global_batch=64)


def code(text: str) -> int:
    return REASONS.index(text)


def batch(n_gpus: int, **fields) -> PlanBatch:
    """One plan as a batch, bypassing Plan's own checks so that any rule can be broken."""
    values = {**PLAN_DEFAULTS, "sp": fields.get("tp", 1) > 1, **fields}
    return PlanBatch.from_columns(n_gpus, {k: [values[k]] for k in PLAN_KEYS})


def failing_rules(model, cluster, workload, plans, rules, framework=None) -> set[int]:
    """All rules a single plan breaks (rejection_reasons reports only the first)."""
    checks = space_mod._checks(model, cluster, workload, plans, rules, False, framework or load_framework())
    return {c for c, hit in checks.items() if bool(np.asarray(hit)[0])}


# (id, model, n_gpus, gpus_per_node, hardware, workload, rules, bad plan, fixed plan, expected reason,
#  other rules that necessarily break with it)
CASES = [
    ("gpu-count", LLAMA8, 16, 8, H100, WL, Rules(), dict(pp=3), dict(pp=4), "tp*pp*cp does not divide the GPU count",
     # dp = 16/3 is not whole, so no dp*mbs divides the global batch either
     {code("global batch not divisible by dp*micro-batch")}),
    ("heads", LLAMA8, 24, 8, H100, TrainWorkload(8192, 24), Rules(), dict(tp=3), dict(tp=2),
     "heads not divisible by tp",
     # n_heads is a multiple of n_kv_heads, so tp not dividing the heads cannot divide the KV heads; nor can
     # sequence parallelism split 8192 tokens 3 ways
     {code("KV heads not divisible by tp (KV heads are not replicated in training)"),
      code("sequence not divisible by cp*tp under sequence parallelism")}),
    ("kv-heads", GQA_TOY, 16, 8, H100, WL, Rules(), dict(tp=8), dict(tp=4),
     "KV heads not divisible by tp (KV heads are not replicated in training)", set()),
    ("kv-heads-llama-tp16", LLAMA8, 16, 16, H100, WL, Rules(), dict(tp=16), dict(tp=8),
     "KV heads not divisible by tp (KV heads are not replicated in training)", set()),
    ("tp-within-node", GPT3, 32, 8, H100, WL, Rules(), dict(tp=16), dict(tp=8), "tp spans more than one node", set()),
    ("pp-exceeds-layers", GQA_TOY, 16, 8, H100, WL, Rules(), dict(pp=16), dict(pp=8), "pipeline stages exceed layers",
     set()),
    ("pp-vp-exceeds-layers", GQA_TOY, 16, 8, H100, WL, Rules(), dict(pp=8, vp=2), dict(pp=8, vp=1),
     "pipeline stages exceed layers", set()),
    # 10 virtual stages for 8 layers: the embedding and the loss may take one each only where stages may be uneven
    ("pp-vp-embedding-loss-even", GQA_TOY, 16, 8, H100, WL, Rules(uneven_pipeline=False), dict(pp=2, vp=5),
     dict(pp=2, vp=4), "pipeline stages exceed layers", {code("layers not divisible by pp*vp")}),
    ("uneven-pipeline", LLAMA8, 24, 8, H100, TrainWorkload(8192, 48), Rules(uneven_pipeline=False), dict(pp=3),
     dict(pp=4), "layers not divisible by pp*vp", set()),
    ("uneven-virtual", LLAMA8, 16, 8, H100, WL, Rules(uneven_pipeline=False), dict(pp=2, vp=3), dict(pp=2, vp=4),
     "layers not divisible by pp*vp", set()),
    ("vp-without-pp", LLAMA8, 16, 8, H100, WL, Rules(), dict(vp=2), dict(vp=1), "vp > 1 without pipeline parallelism",
     set()),
    ("sp-without-tp", LLAMA8, 16, 8, H100, WL, Rules(), dict(sp=True), dict(sp=False),
     "sequence parallelism without tp > 1", set()),
    ("cp-vs-sequence", LLAMA8, 16, 8, H100, TrainWorkload(4100, 64), Rules(), dict(cp=4), dict(cp=2),
     # 4100 % (2*4) = 4; 4100 % (2*2) = 0
     "sequence not divisible by 2*cp (load-balanced causal ring attention)", set()),
    ("sp-vs-sequence", LLAMA8, 16, 8, H100, TrainWorkload(8196, 64), Rules(), dict(tp=8), dict(tp=4),
     # 8196 % 8 = 4: sequence parallelism cannot split the tokens evenly over TP8; 8196 % 4 = 0
     "sequence not divisible by cp*tp under sequence parallelism", set()),
    ("experts-vs-ep", MIXTRAL, 24, 8, H100, TrainWorkload(4096, 48), Rules(), dict(ep=3), dict(ep=4),
     # dp*cp = 24 is a multiple of 3, so only the expert count objects
     "experts not divisible by ep", set()),
    ("ep-vs-dp-cp", MIXTRAL, 8, 8, H100, TrainWorkload(4096, 16), Rules(), dict(tp=2, ep=8), dict(tp=2, ep=4),
     # etp = tp = 2: etp*ep = 16 does not divide the 8 ranks of the stage (ep does not divide dp*cp = 4)
     "etp*ep does not divide the ranks of a pipeline stage (tp*cp*dp)", set()),
    ("ep-folding", MIXTRAL, 8, 8, H100, TrainWorkload(4096, 16), Rules(), dict(tp=2, ep=8), dict(tp=2, ep=8, etp=1),
     # MoE parallel folding: with expert TP 1, EP8 spans the TP and DP ranks of attention
     "etp*ep does not divide the ranks of a pipeline stage (tp*cp*dp)", set()),
    ("etp-dense", LLAMA8, 16, 8, H100, WL, Rules(), dict(tp=2, etp=1), dict(tp=2), "etp differs from tp on a dense model",
     set()),
    ("etp-ffn", MIXTRAL, 24, 8, H100, TrainWorkload(4096, 48), Rules(), dict(etp=3, ep=8), dict(etp=1, ep=8),
     # 14336 = 2^11 * 7 does not divide by 3
     "expert FFN width not divisible by etp", set()),
    ("etp-within-node", MIXTRAL, 32, 8, H100, TrainWorkload(4096, 64), Rules(), dict(etp=16, ep=2), dict(etp=8, ep=2),
     "etp spans more than one node", set()),
    ("fw-etp", MIXTRAL, 16, 8, H100, TrainWorkload(4096, 32), Rules(), dict(tp=2, etp=1, ep=4), dict(tp=2, ep=4),
     "expert tensor parallelism the framework does not offer", set(), "megatron-lm@2024-07"),
    ("fw-dualpipe", LLAMA8, 16, 8, H100, WL, Rules(), dict(pp=2, schedule="dualpipe"), dict(pp=2),
     "dualpipe schedule the framework does not offer", set()),
    # DualPipe (deepseek-ai/DualPipe step()): an even pp > 1 and an even number of micro-batches >= 2*pp.
    ("dualpipe-shape", LLAMA8, 16, 8, H100, WL, Rules(), dict(schedule="dualpipe"), dict(pp=2, schedule="dualpipe"),
     "dualpipe needs an even pp > 1, vp = 1 and an even number of micro-batches >= 2*pp", set(), "other"),
    ("global-batch", LLAMA8, 16, 8, H100, TrainWorkload(8192, 24), Rules(), dict(mbs=1), dict(tp=2, mbs=1),
     # dp=16 does not divide 24; with tp=2, dp=8 does
     "global batch not divisible by dp*micro-batch", set()),
    ("global-batch-mbs", LLAMA8, 16, 8, H100, TrainWorkload(8192, 32), Rules(), dict(mbs=4), dict(mbs=2),
     "global batch not divisible by dp*micro-batch", set()),
    ("fp8-on-a100", LLAMA8, 16, 8, A100, WL, Rules(), dict(precision="fp8"), dict(precision="bf16"),
     "precision not supported by the GPU", set()),
    ("offload-zero0", LLAMA8, 16, 8, H100, WL, Rules(), dict(offload="cpu", zero=0), dict(offload="cpu", zero=1),
     "optimizer offload needs zero >= 1", set()),
    ("sp-with-tp", LLAMA8, 16, 8, H100, WL, Rules(), dict(tp=2, sp=False), dict(tp=2, sp=True),
     "sp=false with tp > 1 (space rule sp_with_tp)", set()),
    # The framework's rules (profiles/frameworks): what the software can run.
    ("fw-parallelism", LLAMA8, 16, 8, H100, WL, Rules(), dict(tp=2, zero=3), dict(tp=1, zero=3),
     "parallelism the framework does not offer", set(), "llm-foundry"),
    ("fw-zero", LLAMA8, 16, 8, H100, WL, Rules(), dict(zero=1), dict(zero=0),
     "ZeRO stage the framework does not offer (with this pipeline or expert parallelism)", set(), "megatron-lm@2021-04"),
    ("fw-zero-with-pp", LLAMA8, 16, 8, H100, WL, Rules(), dict(pp=2, zero=3), dict(pp=1, zero=3),
     "ZeRO stage the framework does not offer (with this pipeline or expert parallelism)", set(), "deepspeed"),
    # DeepSpeed's MoE (DeepSpeed-MoE, AutoEP) asserts "MoE not supported with Stage 3"
    ("fw-zero3-with-ep", MIXTRAL, 16, 8, H100, TrainWorkload(4096, 32), Rules(), dict(ep=4, zero=3),
     dict(ep=4, zero=2), "ZeRO stage the framework does not offer (with this pipeline or expert parallelism)", set(),
     "deepspeed"),
    # Megatron-Core's MoELayer.forward raises ValueError in training with tp > 1 and no sequence parallelism; the
    # default space's sp_with_tp rule hides it, so the case runs without that rule, as predict does
    ("fw-moe-tp-needs-sp", MIXTRAL, 16, 8, H100, TrainWorkload(4096, 32), PERMISSIVE_RULES,
     dict(tp=2, sp=False, ep=4), dict(tp=2, sp=True, ep=4),
     "mixture of experts with tp > 1 but no sequence parallelism, which the framework refuses", set()),
    # Megatron-DeepSpeed builds DeepSpeed MoE layers at any ep, which refuse ZeRO-3 too
    ("fw-zero3-with-moe", MIXTRAL, 16, 8, H100, TrainWorkload(4096, 32), Rules(), dict(zero=3), dict(zero=1),
     "ZeRO stage the framework does not offer (with this pipeline or expert parallelism)", set(),
     "megatron-deepspeed"),
    ("fw-selective", LLAMA8, 16, 8, H100, WL, Rules(), dict(zero=3, recompute="selective"),
     dict(zero=3, recompute="full"), "selective recompute the framework does not offer", set(), "llm-foundry"),
    ("fw-interleave-pp", LLAMA8, 16, 8, H100, WL, Rules(), dict(pp=2, vp=2, zero=0), dict(pp=4, vp=2, zero=0),
     "interleaved schedule the framework does not offer for this pp", set(), "megatron-lm@2021-04"),
    # 24 sequences over dp=4 at micro-batch 1: 6 micro-batches, not a multiple of pp=4 (Megatron-Core refuses).
    ("fw-interleave-microbatches", LLAMA8, 16, 8, H100, TrainWorkload(8192, 24), Rules(), dict(pp=4, vp=2),
     dict(pp=4, vp=1), "interleaved schedule needs the micro-batches to be a multiple of pp", set()),
    ("fw-fp8", LLAMA8, 16, 8, H100, WL, Rules(), dict(precision="fp8", zero=0), dict(precision="bf16", zero=0),
     "fp8 the framework does not offer", set(), "megatron-lm@2021-04"),
    # NVFP4 training came to Megatron-Core in 2025 (--fp4-format); the B200 has the FP4 tensor cores
    ("fw-fp4", LLAMA8, 16, 8, B200, WL, Rules(), dict(precision="fp4", zero=1), dict(precision="fp8", zero=1),
     "fp4 the framework does not offer", set(), "megatron-lm@2024-07"),
    ("fp4-on-h100", LLAMA8, 16, 8, H100, WL, Rules(), dict(precision="fp4"), dict(precision="fp8"),
     "precision not supported by the GPU", set()),
    ("fw-offload", LLAMA8, 16, 8, H100, WL, Rules(), dict(offload="cpu", zero=3), dict(offload="none", zero=3),
     "optimizer offload the framework does not offer", set(), "torchtitan"),
    # 65 blocks on pp=8: seven stages of ceil(65/8) = 9 leave the last 2 blocks for 3 MTP modules; pp=4: 65 - 3 x 17 = 14
    ("mtp-last-stage", MINIMAX, 64, 8, H100, TrainWorkload(4096, 256), Rules(), dict(pp=8, ep=8), dict(pp=4, ep=8),
     "MTP modules do not fit on the last pipeline stage (the stages before it hold ceil(blocks/pp) each)", set()),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_rule_broken_alone(case):
    _, model, n, gpn, hw, workload, rules, bad, good, reason, also, *named = case
    fw = load_framework(named[0] if named else None)
    cluster = Cluster(hw, n, gpn)
    bad_plan, good_plan = batch(n, **bad), batch(n, **good)
    assert REASONS[int(rejection_reasons(model, cluster, workload, bad_plan, rules, framework=fw)[0])] == reason
    assert failing_rules(model, cluster, workload, bad_plan, rules, fw) == {code(reason)} | also
    assert int(rejection_reasons(model, cluster, workload, good_plan, rules, framework=fw)[0]) == 0


def test_every_reason_is_covered_by_a_case():
    covered = {c[9] for c in CASES} | {"valid"}
    # "ep > 1 on a dense model" is covered by test_dense_model_with_ep_names_the_dense_rule; the --emit
    # restriction is not a space rule but a search filter, covered by the `search --emit` tests in test_emit.py.
    assert set(REASONS) - covered == {"ep > 1 on a dense model", "not expressible in the --emit format(s)"}


def test_dense_model_with_ep_names_the_dense_rule():
    cluster = Cluster(H100, 16, 8)
    plan = batch(16, ep=2)
    assert REASONS[int(rejection_reasons(LLAMA8, cluster, WL, plan, Rules())[0])] == "ep > 1 on a dense model"


def test_dense_model_with_ep_is_rejected():
    # Whatever the reason code, ep > 1 on a dense model never passes.
    cluster = Cluster(H100, 16, 8)
    assert int(rejection_reasons(LLAMA8, cluster, WL, batch(16, ep=2), Rules())[0]) != 0


def test_space_rules_can_be_relaxed():
    cluster = Cluster(H100, 32, 8)
    assert int(rejection_reasons(GPT3, cluster, WL, batch(32, tp=16), PERMISSIVE_RULES)[0]) == 0
    assert int(rejection_reasons(GPT3, cluster, WL, batch(32, tp=2, sp=False), PERMISSIVE_RULES)[0]) == 0
    cluster24 = Cluster(H100, 24, 8)
    assert int(rejection_reasons(LLAMA8, cluster24, WL, batch(24, pp=3), Rules(uneven_pipeline=True))[0]) == 0


def test_bloom_pp12_on_384_gpus_is_a_valid_plan_where_the_framework_splits_unevenly():
    # BLOOM-176B (70 layers): TP4 PP12 DP8 on 384 A100s with Megatron-DeepSpeed's ZeRO-1 (HF blog,
    # bloom-megatron-deepspeed); DeepSpeed's PipelineModule balances 70 layers over 12 stages.
    bloom = ModelSpec(name="bloom", n_layers=70, hidden_size=14336, ffn_hidden_size=57344, n_heads=112,
                      n_kv_heads=112, head_dim=128, vocab_size=250880, mlp="gelu")
    cluster = Cluster(A100, 384, 8)
    plan = batch(384, tp=4, pp=12, zero=1, sp=False, recompute="full")
    workload = TrainWorkload(2048, 2048)
    assert int(rejection_reasons(bloom, cluster, workload, plan, Rules(sp_with_tp=False),
                                 framework=load_framework("megatron-deepspeed@2022-07"))[0]) == 0
    # Megatron-LM of 2022 needs the layers to divide by the stages.
    assert REASONS[int(rejection_reasons(bloom, cluster, workload, plan, Rules(sp_with_tp=False),
                                         framework=load_framework("megatron-lm@2022-07"))[0])] == \
        "layers not divisible by pp*vp"


def test_first_failing_rule_wins():
    # tp=3 on 16 GPUs breaks the GPU-count rule and the head rules; the GPU-count rule is reported.
    cluster = Cluster(H100, 16, 8)
    assert int(rejection_reasons(LLAMA8, cluster, WL, batch(16, tp=3), Rules())[0]) == 1


def test_vectorised_reasons_match_one_by_one():
    cluster = Cluster(H100, 16, 8)
    plans = [dict(tp=2), dict(pp=3), dict(vp=2), dict(tp=2, sp=False), dict(precision="fp8"), dict(cp=2)]
    cols = {k: [{**PLAN_DEFAULTS, "sp": p.get("tp", 1) > 1, **p}[k] for p in plans] for k in PLAN_KEYS}
    together = rejection_reasons(LLAMA8, cluster, WL, PlanBatch.from_columns(16, cols), Rules())
    alone = [int(rejection_reasons(LLAMA8, cluster, WL, batch(16, **p), Rules())[0]) for p in plans]
    assert list(together) == alone


# --- axis choices: choices that can never be valid are dropped --------------------------------

def test_axis_choices_drop_fp8_on_a100_and_tp_beyond_node_and_ep_on_dense():
    space = load_space(None)
    choices = axis_choices(space, LLAMA8, Cluster(A100, 16, 8), WL)
    assert "fp8" not in choices["precision"]
    assert choices["ep"] == (1,)
    assert max(choices["tp"]) <= 8
    h100 = axis_choices(space, LLAMA8, Cluster(H100, 16, 8), WL)
    assert h100["precision"] == ("bf16",)  # fp8 is searched only when asked
    asked = axis_choices(space.with_precisions(("bf16", "fp8")), LLAMA8, Cluster(H100, 16, 8), WL)
    assert asked["precision"] == ("bf16", "fp8")
    assert axis_choices(space.with_precisions(("bf16", "fp8")), LLAMA8, Cluster(A100, 16, 8), WL)["precision"] == ("bf16",)


def test_fp8_only_space_on_a100_is_kept_so_the_rejection_names_it():
    space = load_space(None).fixed({"precision": "fp8"})
    cluster = Cluster(A100, 8, 8)
    choices = axis_choices(space, LLAMA8, cluster, WL)
    assert choices["precision"] == ("fp8",)
    enumeration = enumerate_valid(LLAMA8, cluster, WL, choices, space.rules)
    assert len(enumeration.plans) == 0
    assert enumeration.rejected.get("precision not supported by the GPU", 0) > 0


def test_auto_axes():
    space = load_space(None)
    choices = axis_choices(space, MIXTRAL, Cluster(H100, 64, 8), WL)
    assert choices["ep"] == (1, 2, 4, 8)
    # pp: every stage count that divides 64 GPUs, up to the 32 layers
    assert choices["pp"] == (1, 2, 4, 8, 16, 32)
    # ... including counts that do not divide the layers: BLOOM's PP12 on 384 GPUs (70 layers)
    bloom = ModelSpec(name="bloom", n_layers=70, hidden_size=14336, ffn_hidden_size=57344, n_heads=112, n_kv_heads=112,
                      head_dim=128, vocab_size=250880)
    assert 12 in axis_choices(space, bloom, Cluster(A100, 384, 8), TrainWorkload(2048, 2048))["pp"]


def test_enumerated_plans_pass_every_rule():
    space = load_space(None)
    cluster = Cluster(H100, 16, 8)
    choices = axis_choices(space, MIXTRAL, cluster, TrainWorkload(4096, 64))
    enumeration = enumerate_valid(MIXTRAL, cluster, TrainWorkload(4096, 64), choices, space.rules)
    assert len(enumeration.plans) > 0
    assert not rejection_reasons(MIXTRAL, cluster, TrainWorkload(4096, 64), enumeration.plans, space.rules).any()


# --- space YAML errors ------------------------------------------------------------------------

TRAIN_YAML = Path(__file__).resolve().parent.parent / "search_spaces" / "train.yaml"


def bundled_space_dict() -> dict:
    return yaml.safe_load(TRAIN_YAML.read_text())


def write_space(tmp_path: Path, data: dict) -> str:
    path = tmp_path / "space.yaml"
    path.write_text(yaml.safe_dump(data))
    return str(path)


def test_bundled_space_loads():
    space = load_space(None)
    assert set(space.axes) == set(PLAN_KEYS)
    assert space.rules == Rules(tp_within_node=True, uneven_pipeline=True, sp_with_tp=True)
    assert space.axes["pp"] == "auto" and space.axes["ep"] == "auto"
    assert space.axes["sp"] == (False, True)


def test_space_file_round_trips(tmp_path):
    path = write_space(tmp_path, bundled_space_dict())
    assert load_space(path).axes == load_space(None).axes


def _mutate(data: dict, where: str, value) -> dict:
    section, _, key = where.partition(".")
    if key:
        data[section][key] = value
    else:
        data[section] = value
    return data


@pytest.mark.parametrize("where, value, named", [
    ("axes.tpp", [1, 2], "axes.tpp"),                      # unknown axis
    ("rules.tp_in_node", True, "rules.tp_in_node"),         # unknown rule
    ("axes.tp", [1, "x"], "axes.tp"),                       # not an integer
    ("axes.tp", [1.5], "axes.tp"),
    ("axes.tp", "auto", "axes.tp"),                          # only pp and ep accept auto
    ("axes.mbs", [], "axes.mbs"),                            # empty
    ("axes.recompute", ["sometimes"], "axes.recompute"),    # not a choice
    ("axes.precision", ["fp6"], "axes.precision"),
    ("axes.sp", ["maybe"], "axes.sp"),
    ("rules.tp_within_node", "yes", "rules.tp_within_node"),  # not a bool
    ("rules", [1], "rules"),
    ("axes", [1], "axes"),
    ("colour", "blue", "colour"),                              # unknown top-level key
])
def test_bad_space_yaml_names_file_and_field(tmp_path, where, value, named):
    path = write_space(tmp_path, _mutate(bundled_space_dict(), where, value))
    with pytest.raises(InputError) as info:
        load_space(path)
    message = str(info.value)
    assert path in message
    assert named in message


def test_missing_axis_names_it(tmp_path):
    data = bundled_space_dict()
    del data["axes"]["offload"]
    path = write_space(tmp_path, data)
    with pytest.raises(InputError, match="axes.offload") as info:
        load_space(path)
    assert path in str(info.value)


def test_malformed_space_yaml(tmp_path):
    path = tmp_path / "broken.yaml"
    path.write_text("axes:\n  tp: [1, 2\n")
    with pytest.raises(InputError, match="malformed YAML") as info:
        load_space(str(path))
    assert str(path) in str(info.value)


def test_missing_space_file(tmp_path):
    with pytest.raises(InputError, match="not found"):
        load_space(str(tmp_path / "nope.yaml"))


@pytest.mark.parametrize("key, value", [("tp", 0), ("mbs", -1), ("zero", 5), ("vp", 0), ("cp", 0)])
def test_out_of_range_axis_values_are_rejected(tmp_path, key, value):
    data = bundled_space_dict()
    data["axes"][key] = [value]
    path = write_space(tmp_path, data)
    with pytest.raises(InputError, match=f"axes.{key}"):
        load_space(path)


def test_fixed_narrows_axes():
    space = load_space(None).fixed({"tp": 8, "recompute": "full"})
    assert space.axes["tp"] == (8,)
    assert space.axes["recompute"] == ("full",)
    assert space.axes["mbs"] == load_space(None).axes["mbs"]


# The numbers each rule compared, worked by hand from the case's model, cluster and workload.
NUMBERED = {
    "heads": "heads=32, tp=3",
    "sp-vs-sequence": "seq_len=8196, cp*tp=1*8=8",
    "kv-heads": "kv_heads=4, tp=8",
    "tp-within-node": "tp=16, GPUs per NVLink domain=8",
    "pp-exceeds-layers": "pp*vp=16, layers=8",
    "uneven-pipeline": "layers=32, pp*vp=3",
    "cp-vs-sequence": "seq_len=4100, 2*cp=8",
    "experts-vs-ep": "experts=8, ep=3",
    "ep-vs-dp-cp": "etp*ep=16, tp*cp*dp=8",  # etp = tp = 2
    "etp-ffn": "expert_ffn_hidden_size=14336, etp=3",
    "etp-within-node": "etp=16, GPUs per NVLink domain=8",
    # 16 GPUs, tp 1: dp 16 against 24 sequences
    "global-batch": "global_batch=24, dp*mbs=16*1=16",
    "global-batch-mbs": "global_batch=32, dp*mbs=16*4=64",
    # 24 sequences over dp = 16 / pp 4 = 4 at micro-batch 1: 6 micro-batches
    "fw-interleave-microbatches": "micro-batches=6, pp=4",
    "dualpipe-shape": "pp=1, vp=1, micro-batches=4",  # 64 sequences over dp 16
    "mtp-last-stage": "blocks on the last stage=2, mtp_layers=3",  # 65 - 7 x 9
}


@pytest.mark.parametrize("case", [c for c in CASES if c[0] in NUMBERED], ids=lambda c: c[0])
def test_a_broken_rule_names_the_numbers_it_compared(case):
    """An invalid plan's message says what to change: the rule, then the values it compared."""
    name, model, n, gpn, hw, workload, rules, bad, _, reason, _, *named = case
    fw = load_framework(named[0] if named else None)
    plan = batch(n, **bad).plan(0)
    text = space_mod.reason_text(code(reason), plan, fw, model=model, cluster=Cluster(hw, n, gpn), workload=workload)
    assert text == f"{reason} ({NUMBERED[name]})"
    # without the inputs the rule alone is named (a plan string checked on its own)
    assert space_mod.reason_text(code(reason), plan, fw).startswith(reason)


def test_plan_violation_names_the_numbers():
    from autotune.training.plan import Plan
    from autotune.training.space import plan_violation

    why = plan_violation(LLAMA8, Cluster(H100, 16, 8), TrainWorkload(8192, 24), Plan(16, mbs=1))
    assert why == "global batch not divisible by dp*micro-batch (global_batch=24, dp*mbs=16*1=16)"


@pytest.mark.parametrize("blocks", [8, 61, 62, 65, 80, 94, 126])
def test_the_priced_last_stage_is_the_emitted_one(blocks):
    """The cost model's last pipeline stage holds the blocks the Megatron launch file gives the last rank, also
    where ceil(blocks/pp) on the others would leave it less than nothing (80 layers over pp 32: 31 x 3 = 93)."""
    from autotune.outputs.emit.megatron import pipeline_counts
    from autotune.training.geometry import last_stage_blocks

    for pp in range(1, min(blocks, 64) + 1):
        counts = pipeline_counts(blocks, pp)
        assert sum(counts) == blocks and max(counts) == -(-blocks // pp)
        assert float(last_stage_blocks(float(blocks), np.array([pp]))[0]) == counts[-1], pp


def test_uneven_stages_give_the_embedding_and_the_loss_a_virtual_stage_each():
    """Megatron-Bridge trains Llama-3.1 405B (126 layers) on pp 16 x vp 8 = 128 virtual stages, the first and last
    holding the embedding and the loss (--account-for-embedding-in-pipeline-split / -loss-): such a plan is valid
    where the framework splits unevenly, and two more stages than that are not."""
    fw = load_framework("megatron-lm")
    cluster = Cluster(H100, 16, 8)
    ok = rejection_reasons(GQA_TOY, cluster, WL, batch(16, pp=2, vp=5), Rules(), framework=fw)
    assert int(ok[0]) == 0
    over = rejection_reasons(GQA_TOY, cluster, WL, batch(16, pp=2, vp=6), Rules(), framework=fw)
    assert REASONS[int(over[0])] == "pipeline stages exceed layers"
    # but every pipeline rank holds a layer: pp 9 for 8 layers stays refused, though 9 <= 8 + 2
    nine = Cluster(H100, 9, 1)
    assert REASONS[int(rejection_reasons(GQA_TOY, nine, WL, batch(9, pp=9), Rules(),
                                         framework=fw)[0])] == "pipeline stages exceed layers"
