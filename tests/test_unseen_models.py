"""Models no measurement was fitted on (Kimi-K2.5, GLM-5, MiniMax-M2.5, ...), as users write them down.

A measured row of such a model, in the schema of serving_silicon.csv, is predicted whatever spelling of its GPU,
engine, mode, weight format or model id the row uses, as long as the spelling names one thing: the GPU as
nvidia-smi or AIConfigurator names it (``NVIDIA H100 80GB HBM3``, ``GB200 NVL72``, ``other: b300_sxm``), the engine
as ``TensorRT-LLM`` or ``sglang@0.5.6``, the model id with a revision or as the repository's address, AIConfigurator's
own quant modes (``fp8_block``, ``int4_wo``).  Each spelled row must predict exactly what the canonical row
predicts.  A name that fits two profiles (``h100``) is skipped with both named.  The CLI reads the same names.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from tests.test_bad_input import assert_user_error, predicted

runner = CliRunner()
SILICON = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_silicon.csv"


def _bundled() -> tuple[list[str], list[dict]]:
    with open(SILICON, newline="", encoding="utf-8-sig") as handle:
        reader = csv.DictReader(handle)
        return list(reader.fieldnames or []), list(reader)


COLUMNS, ROWS = _bundled()
# A DeepSeek-R1 agg row on a GB200 rack, relabelled as Kimi-K2.5 (DeepSeek-V3's architecture with 64 heads and 384
# experts, INT4 routed experts): a row of a model the bundled parameters were not fitted on.
BASE = next(r for r in ROWS if r["hf_model_id"] == "deepseek-ai/DeepSeek-R1" and r["gpu"] == "other: gb200"
            and r["mode"] == "agg" and r["engine"] == "trtllm" and r["duplicate_primary"] == "true"
            and r["quality_flags"] == "engine_version_unknown")
KIMI = {**BASE, "hf_model_id": "moonshotai/Kimi-K2.5", "weight_precision": "bf16", "moe_precision": "int4",
        "duplicate_set": "", "hf_config": ""}


def _write(tmp_path: Path, rows: list[dict]) -> Path:
    path = tmp_path / "unseen.csv"
    with open(path, "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


def _validate(tmp_path: Path, rows: list[dict]) -> dict:
    result = runner.invoke(app, ["validate", str(_write(tmp_path, rows)), "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


SPELLINGS = {
    "gpu-nvl72": {"gpu": "GB200 NVL72"},
    "gpu-underscore": {"gpu": "gb200_nvl72"},
    "gpu-other-nvl72": {"gpu": "other: gb200_nvl72"},
    "gpu-vendor": {"gpu": "NVIDIA GB200"},
    "engine-name": {"engine": "TensorRT-LLM"},
    "engine-release": {"engine": "trtllm@1.2.0rc2"},
    "mode-word": {"mode": "aggregated"},
    "id-revision": {"hf_model_id": "moonshotai/Kimi-K2.5@main"},
    "id-commit": {"hf_model_id": "moonshotai/kimi-k2.5@54383e83fa343a1331754112fb9e3410c55efa2f"},
    "id-address": {"hf_model_id": "https://huggingface.co/moonshotai/Kimi-K2.5"},
    "id-tree": {"hf_model_id": "https://huggingface.co/moonshotai/Kimi-K2.5/tree/main"},
    "id-slash": {"hf_model_id": "moonshotai/Kimi-K2.5/"},
    "aic-quant-modes": {"weight_precision": "float16", "moe_precision": "int4_wo"},
    "torch-dtype": {"weight_precision": "bfloat16"},
}


def test_spellings_of_an_unseen_models_row_predict_as_the_row(tmp_path):
    rows = [{**KIMI, "id": "canonical"}]
    for k, (name, change) in enumerate(SPELLINGS.items()):
        # each its own measurement (else it is skipped as a rounded copy of the canonical row)
        rows.append({**KIMI, **change, "id": name, "ttft_ms": str(float(KIMI["ttft_ms"]) + k + 1)})
    doc = _validate(tmp_path, rows)
    assert doc["skipped"] == []
    got = {r["id"]: r for r in doc["rows"]}
    want = got["canonical"]
    assert want["gpu"] == "gb200-nvl72" and want["engine"] == "trtllm" and want["mode"] == "agg"
    assert 0 < want["predicted_tpot_ms"] < 100 and 0 < want["predicted_ttft_ms"] < 1e6
    for name in SPELLINGS:
        assert got[name]["predicted_ttft_ms"] == want["predicted_ttft_ms"], name
        assert got[name]["predicted_tpot_ms"] == want["predicted_tpot_ms"], name


def test_aic_fp8_block_label_is_fp8(tmp_path):
    glm = {**BASE, "hf_model_id": "zai-org/GLM-5", "weight_precision": "fp8", "moe_precision": "fp8", "id": "fp8"}
    doc = _validate(tmp_path, [glm, {**glm, "id": "fp8_block", "weight_precision": "fp8_block",
                                     "moe_precision": "fp8_block", "ttft_ms": str(float(glm["ttft_ms"]) + 1)}])
    assert doc["skipped"] == []
    a, b = doc["rows"]
    assert (a["predicted_ttft_ms"], a["predicted_tpot_ms"]) == (b["predicted_ttft_ms"], b["predicted_tpot_ms"])


@pytest.mark.parametrize("gpu, profile", [
    ("NVIDIA H100 80GB HBM3", "h100-sxm5-80gb"), ("H100 SXM", "h100-sxm5-80gb"), ("NVIDIA H200", "h200-sxm-141gb"),
    ("B200 SXM", "b200-sxm-180gb"), ("b300-sxm", "b300-sxm-288gb"), ("other: b300_sxm", "b300-sxm-288gb"),
    ("GB300 NVL72", "gb300-nvl72"), ("RTX PRO 6000 Blackwell", "rtx-pro-6000-blackwell"),
])
def test_gpu_spellings_name_their_profile(tmp_path, gpu, profile):
    row = {**KIMI, "id": "r", "gpu": gpu, "tp": "8", "attention_dp": "1", "moe_tp": "8", "moe_ep": "1",
           "gpus_per_replica": "8", "n_gpus": "8", "concurrency": "8", "concurrency_per_replica": "8"}
    doc = _validate(tmp_path, [row])
    assert [r["gpu"] for r in doc["rows"]] == [profile], doc["skipped"]


def test_a_gpu_name_of_two_profiles_is_skipped_naming_both(tmp_path):
    doc = _validate(tmp_path, [{**KIMI, "id": "r", "gpu": "H100"}])
    assert doc["rows"] == []
    assert doc["skipped"][0]["reason"] == ("GPU 'H100' names more than one bundled profile (h100-sxm5-80gb, "
                                           "h100-sxm5-96gb-500w); write one of them")


def test_a_bundled_spec_name_in_the_id_column_says_which_id_to_write(tmp_path):
    doc = _validate(tmp_path, [{**KIMI, "id": "r", "hf_model_id": "kimi-k2.5"}])
    assert doc["skipped"][0]["reason"] == ("model 'kimi-k2.5': a bundled spec's name, not a Hugging Face id; write the "
                                           "id of the checkpoint (moonshotai/Kimi-K2.5)")


# --- the CLI reads the same names ------------------------------------------------------------------------------

PREDICT = ["predict", "--workload", "serve", "--gpus", "8", "-p", "tp=8", "--input-len", "1024", "--output-len", "1024",
           "--concurrency", "64", "--json"]


def _predict(model: str, hardware: str) -> dict:
    result = runner.invoke(app, [*PREDICT, "-m", model, "-H", hardware])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def test_cli_hardware_spellings():
    want = _predict("moonshotai/Kimi-K2.5", "b200-sxm-180gb")["estimate"]
    for spelling in ("NVIDIA B200", "B200 SXM", "b200_sxm"):
        assert _predict("moonshotai/Kimi-K2.5", spelling)["estimate"] == want, spelling


def test_cli_hardware_name_of_two_profiles_names_both():
    result = runner.invoke(app, [*PREDICT, "-m", "moonshotai/Kimi-K2.5", "-H", "h100"])
    assert_user_error(result, "field '--hardware'", "'h100' names more than one bundled profile",
                      "h100-sxm5-80gb, h100-sxm5-96gb-500w")


def test_cli_model_id_with_revision_or_address_plans_the_catalogued_model():
    want = _predict("moonshotai/Kimi-K2.5", "b200")
    assert want["estimate"]["checkpoint"] == "compressed-tensors:int4"
    for spelling in ("moonshotai/Kimi-K2.5@main", "https://huggingface.co/moonshotai/Kimi-K2.5"):
        got = _predict(spelling, "b200")
        assert got["estimate"] == want["estimate"] and got["plan"] == want["plan"], spelling


def test_emit_does_not_load_another_revision(tmp_path):
    args = ["emit", "tp=8", "--format", "vllm", "-H", "b200", "--gpus", "8", "--input-len", "1024", "--output-len", "1024"]
    result = runner.invoke(app, [*args, "-m", "moonshotai/Kimi-K2.5@v2", "--out", str(tmp_path / "rev")])
    assert result.exit_code == 0, result.output
    assert "names revision v2 of moonshotai/Kimi-K2.5" in result.output
    script = (tmp_path / "rev" / "serve_vllm.sh").read_text()
    assert "then MODEL=" not in script and "MODEL must name the kimi-k2.5 weights" in script
    result = runner.invoke(app, [*args, "-m", "https://huggingface.co/moonshotai/Kimi-K2.5", "--out", str(tmp_path / "a")])
    assert result.exit_code == 0, result.output
    assert "MODEL=moonshotai/Kimi-K2.5; fi" in (tmp_path / "a" / "serve_vllm.sh").read_text()


def test_no_two_profiles_share_a_spelling():
    from autotune.inputs.hardware import _squashed, hardware_aliases, hardware_names

    named: dict[str, set[str]] = {}
    for name, profile in [*hardware_aliases().items(), *((p, p) for p in hardware_names())]:
        named.setdefault(_squashed(name), set()).add(profile)
    assert {k: v for k, v in named.items() if len(v) > 1} == {}


# --- serving plans the engines can launch -----------------------------------------------------------------------

def _moe_tp(plan: dict, side: str = "") -> int:
    tp, dp, ep = (plan[f"{side}{k}"] for k in ("tp", "dp", "ep"))
    return tp * dp // ep


def test_search_never_splits_an_expert_over_a_width_it_does_not_divide():
    """Kimi-K2.5's experts are 2048 wide: attention DP 72 without EP (each expert split 72 ways) was the best plan
    on a GB200 rack, and vLLM's and SGLang's FusedMoE refuse it (intermediate_size % tp_size == 0)."""
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "moonshotai/Kimi-K2.5", "-H", "gb200",
                                 "--gpus", "72", "--input-len", "8192", "--output-len", "1024", "--ttft-ms", "3000",
                                 "--tpot-ms", "40", "--engine", "sglang", "--top", "20", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    plans = [p["plan"] for p in doc["plans"]]
    assert plans
    for plan in plans:
        sides = ("prefill_", "decode_") if plan["mode"] == "disagg" else ("",)
        for side in sides:
            assert 2048 % _moe_tp(plan, side) == 0, plan
    assert doc["search"]["rejected"]["expert FFN width not divisible by the GPUs each expert is split over (tp*dp/ep)"] > 0


def test_predict_refuses_an_expert_split_the_engines_refuse():
    args = ["predict", "--workload", "serve", "-m", "moonshotai/Kimi-K2.5", "-H", "gb200", "--gpus", "72",
            "--input-len", "1024", "--output-len", "1024"]
    bad = runner.invoke(app, [*args, "-p", "tp=1,dp=72,ep=1"])
    assert bad.exit_code == 1 and "invalid plan: expert FFN width not divisible" in bad.output
    # 2048 / (1*72/72) and 2048 / (8*8/8): the same rack with EP, or a TP8 engine, runs
    for plan in ("tp=1,dp=72,ep=72", "tp=8,dp=1,ep=1"):
        assert runner.invoke(app, [*args, "-p", plan]).exit_code == 0, plan


def test_capacity_counts_only_plans_the_checkpoint_runs():
    """Kimi-K2.5's checkpoint is INT4: the fewest GPUs that serve 20 requests/s were reported as 12 with an NVFP4
    plan ("It needs an NVFP4 checkpoint"), a count the user's weights do not reach."""
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "moonshotai/Kimi-K2.5", "-H", "gb200",
                                 "--gpus", "8..144", "--input-len", "4096", "--output-len", "1024", "--request-rate",
                                 "20", "--ttft-ms", "3000", "--tpot-ms", "50", "--top", "3", "--json"])
    assert result.exit_code == 0, result.output
    doc = json.loads(result.stdout)
    best = doc["plans"][0]
    assert best["estimate"]["meets_targets"] and best["estimate"].get("needs_checkpoint") is None
    assert best["estimate"]["weights_from"] == "checkpoint"
    tried = {t["gpus"]: t["meeting_runnable"] for t in doc["capacity"]["tried"]}
    # the NVFP4 plans of 12 GPUs do not count (the doubling search may not try 12 at all: 8, 16, then between)
    assert tried.get(12, 0) == 0 and doc["capacity"]["gpus"] > 12 and tried[doc["capacity"]["gpus"]] > 0


def test_emit_refuses_a_plans_json_entry_no_engine_launches(tmp_path):
    """A plans.json an older autotune wrote (or a hand edit) with attention DP 72 and no EP for Kimi-K2.5: emit
    wrote its script, which the engines refuse at launch; a plan string was already refused."""
    out = tmp_path / "kimi"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "moonshotai/Kimi-K2.5", "-H", "gb200",
                                 "--gpus", "72", "--input-len", "1024", "--output-len", "1024", "--engine", "sglang",
                                 "--top", "2", "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "plans.json").read_text())
    plan = document["plans"][0]["plan"]
    for key in [k for k in plan if k.startswith(("prefill_", "decode_"))]:
        del plan[key]
    plan.update(mode="agg", tp=1, pp=1, dp=72, ep=1, replicas=1)
    (out / "plans.json").write_text(json.dumps(document))
    refused = runner.invoke(app, ["emit", str(out / "plans.json"), "--format", "sglang", "--out", str(tmp_path / "e")])
    assert_user_error(refused, "plans.json", "field 'plans.plan'", "plan of rank 1 cannot run",
                      "expert FFN width not divisible")
    assert not (tmp_path / "e").exists()
    kept = runner.invoke(app, ["emit", str(out / "plans.json"), "--format", "sglang", "--rank", "2",
                               "--out", str(tmp_path / "e2")])
    assert kept.exit_code == 0, kept.output


# --- training ---------------------------------------------------------------------------------------------------

def test_training_search_keeps_mtp_modules_on_a_last_stage_that_holds_them(tmp_path):
    """MiniMax-M2.5: 62 layers and 3 MTP modules.  On 64 H100s the best Megatron-LM plan was pp=8 vp=4, whose
    stages before the last hold ceil(65/8) = 9 blocks each and leave the last 2 blocks for its 3 MTP modules: the
    cost model priced an impossible split and `emit --format megatron` refused the search's own winner."""
    out = tmp_path / "mm"
    result = runner.invoke(app, ["search", "-m", "MiniMaxAI/MiniMax-M2.5", "-H", "h100-sxm5-80gb", "--gpus", "64",
                                 "-s", "4096", "-b", "256", "--top", "5", "--out", str(out)])
    assert result.exit_code == 0, result.output
    for entry in json.loads((out / "plans.json").read_text())["plans"]:
        pp = entry["plan"]["pp"]
        per_stage = -(-65 // pp)
        assert pp == 1 or 65 - (pp - 1) * per_stage >= 3, entry["plan"]
    emitted = runner.invoke(app, ["emit", str(out / "plans.json"), "--format", "megatron", "--out", str(tmp_path / "e")])
    assert emitted.exit_code == 0, emitted.output
    args = ["predict", "-m", "MiniMaxAI/MiniMax-M2.5", "-H", "h100-sxm5-80gb", "--gpus", "64", "-s", "4096", "-b", "256"]
    refused = runner.invoke(app, [*args, "-p", "tp=1,pp=8,ep=8"])  # 65 - 7 x 9 = 2 blocks for 3 MTP modules
    assert refused.exit_code == 1 and "MTP modules do not fit on the last pipeline stage" in refused.output
    held = predicted(runner.invoke(app, [*args, "-p", "tp=1,pp=4,ep=8", "--json"]))  # 65 - 3 x 17 = 14 blocks
    assert held["estimate"]["step_time_s"] > 0  # a plan with numbers: the MTP modules are no reason against it
    # DeepSeek-V3 (1 MTP module) on pp=16: 62 - 15 x 4 = 2 blocks on the last stage, as its measured runs used
    deepseek = runner.invoke(app, ["predict", "-m", "deepseek-v3", "-H", "h100-sxm5-80gb", "--gpus", "1024", "-s", "4096",
                                   "-b", "4096", "-p", "tp=1,pp=16,ep=64"])
    assert "MTP modules do not fit" not in deepseek.output, deepseek.output


# --- the load of one replica -------------------------------------------------------------------------------------

def test_a_total_concurrency_over_stated_replicas_is_split_over_them(tmp_path):
    """A row of two replicas (n_gpus twice the layout) with only the total concurrency was predicted as one
    replica carrying all of it; it carries half, as the row with concurrency_per_replica says."""
    base = {**KIMI, "id": "one", "replicas": "1", "concurrency": "64", "concurrency_per_replica": "64"}
    gpus = int(base["gpus_per_replica"])
    two = {**base, "id": "two", "replicas": "2", "n_gpus": str(2 * gpus), "concurrency": "128",
           "concurrency_per_replica": "", "ttft_ms": str(float(base["ttft_ms"]) + 1)}
    by_gpus = {**two, "id": "by-gpus", "replicas": "", "gpus_per_replica": "", "ttft_ms": str(float(base["ttft_ms"]) + 2)}
    doc = _validate(tmp_path, [base, two, by_gpus])
    assert doc["skipped"] == []
    got = {r["id"]: r for r in doc["rows"]}
    assert got["two"]["concurrency"] == got["by-gpus"]["concurrency"] == 64.0
    for rid in ("two", "by-gpus"):
        assert got[rid]["predicted_tpot_ms"] == got["one"]["predicted_tpot_ms"]


@pytest.mark.parametrize("change, reason", [
    ({"gpus_per_replica": "64"}, "gpus_per_replica 64 is not the {g} GPUs the row's layout takes"),
    ({"replicas": "2", "n_gpus": "{g}"}, "n_gpus {g} is not replicas x the layout's GPUs (2 x {g})"),
    ({"replicas": "", "gpus_per_replica": "", "n_gpus": "{g}1"}, "n_gpus {g}1 is not a whole number of replicas"),
    ({"replicas": "1", "concurrency": "64", "concurrency_per_replica": "32"},
     "concurrency_per_replica 32 is not concurrency / replicas (64 / 1)"),
])
def test_counts_that_contradict_the_layout_skip_the_row_naming_them(tmp_path, change, reason):
    gpus = KIMI["gpus_per_replica"]
    row = {**KIMI, "id": "r", **{k: v.format(g=gpus) for k, v in change.items()}}
    doc = _validate(tmp_path, [row])
    assert doc["rows"] == []
    assert doc["skipped"][0]["reason"].startswith(reason.format(g=gpus)), doc["skipped"]
    assert doc["skipped"][0]["reason"].endswith("the row contradicts itself")
