"""The bundled catalogue of Hugging Face ids (profiles/catalogue/hf_models.yaml): every id of the serving
data resolves to the bundled spec of its architecture, with its checkpoint's weight format."""

from __future__ import annotations

import pytest

from autotune.errors import InputError
from autotune.inputs.catalogue import (
    CHECKPOINT_FORMATS,
    catalogue,
    hf_ids,
    lookup_hf_id,
    resolve_hf_id,
)
from autotune.inputs.modelspec import load_model, model_names

# --- the Hugging Face id catalogue ----------------------------------------------------------------------

# Every hf_model_id of the serving data (serving_silicon_visible.csv, serving_runs.csv) and of the
# configs bundled with it (hf_configs/README.md), with the bundled spec of its architecture.
DATA_IDS = {
    "deepseek-ai/DeepSeek-R1": "deepseek-v3",
    "deepseek-ai/DeepSeek-V3": "deepseek-v3",
    "nvidia/DeepSeek-R1-NVFP4": "deepseek-v3",
    "nvidia/DeepSeek-V3.1-NVFP4": "deepseek-v3",
    "moonshotai/Kimi-K2.5": "kimi-k2.5",
    "zai-org/GLM-5": "glm-5",
    "zhipuai/GLM-5": "glm-5",
    "MiniMaxAI/MiniMax-M2.5": "minimax-m2.5",
    "openai/gpt-oss-120b": "gpt-oss-120b",
    "Qwen/Qwen3.5-397B-A17B": "qwen3.5-397b-a17b",
    "Qwen/Qwen3-235B-A22B-FP8": "qwen3-235b-a22b",
    "Qwen/Qwen3-32B": "qwen3-32b",
    "nvidia/Qwen3-32B-NVFP4": "qwen3-32b",
    "meta-llama/Llama-3.1-70B": "llama3.1-70b",
    "meta-llama/Llama-3.1-8B-Instruct": "llama3.1-8b",
    "nvidia/Llama-3.1-8B-Instruct-FP8": "llama3.1-8b",
    "nvidia/Llama-3.3-70B-Instruct-FP8": "llama3.1-70b",
    "nvidia/Llama-3.3-70B-Instruct-FP4": "llama3.1-70b",
    "nvidia/Llama-3.1-405B-Instruct-FP8": "llama3-405b",
    "nvidia/Llama-3.1-405B-Instruct-FP4": "llama3-405b",
}


@pytest.mark.parametrize("hf_id, spec", sorted(DATA_IDS.items()))
def test_every_id_of_the_serving_data_resolves(hf_id, spec):
    entry = resolve_hf_id(hf_id)
    assert entry.spec == spec
    assert load_model(hf_id).name == spec


def test_catalogue_entries_are_complete():
    assert set(DATA_IDS) <= set(hf_ids())
    for entry in catalogue().values():
        if entry.spec is None:
            assert entry.reason
            continue
        assert entry.spec in model_names(), entry.hf_id
        assert entry.checkpoint in CHECKPOINT_FORMATS and entry.source


def test_catalogue_checkpoints_follow_the_configs():
    assert lookup_hf_id("deepseek-ai/DeepSeek-R1").checkpoint == "fp8"
    assert lookup_hf_id("nvidia/DeepSeek-R1-NVFP4").checkpoint == "nvfp4"
    assert lookup_hf_id("openai/gpt-oss-120b").checkpoint == "mxfp4"
    assert lookup_hf_id("moonshotai/Kimi-K2.5").checkpoint == "int4"
    assert lookup_hf_id("Qwen/Qwen3-32B").checkpoint == "bf16"


def test_catalogue_ids_match_without_case_and_unknown_ids_are_errors():
    assert load_model("DEEPSEEK-AI/deepseek-v3").name == "deepseek-v3"
    assert lookup_hf_id("someone/unknown-model") is None
    with pytest.raises(InputError) as err:
        load_model("someone/unknown-model")
    assert "someone/unknown-model" in str(err.value) and "hf_models.yaml" in str(err.value)


def test_a_known_id_that_cannot_be_expressed_says_why():
    with pytest.raises(InputError) as err:
        load_model("nvidia/Llama-4-Maverick-17B-128E-Instruct-FP8")
    assert "Llama 4 Maverick" in str(err.value) and err.value.field == "--model"


# --- what `autotune models` and `autotune hardware` show of the new fields --------------------------------

def _invoke(*args: str):
    from typer.testing import CliRunner

    from autotune.cli import app

    return CliRunner().invoke(app, list(args), env={"COLUMNS": "240"})


def test_models_show_by_hf_id_lists_the_attention_blocks():
    result = _invoke("models", "show", "deepseek-ai/DeepSeek-V3")
    assert result.exit_code == 0, result.output
    for text in ("deepseek-v3", "mla.kv_lora_rank", "512", "mtp_layers", "MTP parameters", "70,272 B",
                 "deepseek-ai/DeepSeek-R1"):
        assert text in result.stdout


def test_models_show_summarises_layer_kinds():
    result = _invoke("models", "show", "gpt-oss-120b")
    assert result.exit_code == 0, result.output
    assert "18 full, 18 sliding" in result.stdout and "attention_sinks" in result.stdout


def test_models_list_names_the_attention_kind():
    result = _invoke("models", "list")
    assert result.exit_code == 0, result.output
    assert "MLA+DSA" in result.stdout and "45 linear" in result.stdout and "hf_models.yaml" in result.stdout


def test_hardware_show_has_the_scale_up_domain_and_an_estimated_price():
    result = _invoke("hardware", "show", "gb300")
    assert result.exit_code == 0, result.output
    for text in ("scale_up_domain_gpus", "72", "scale_up", "(estimate)", "mxfp8 5000", "nvfp4 15000"):
        assert text in result.stdout
    listed = _invoke("hardware", "list")
    assert listed.exit_code == 0 and "~5.30" in listed.stdout


# --- a plan that states no weights runs the checkpoint's -----------------------------------------------------------

@pytest.mark.parametrize("hf_id, checkpoint, weights", [
    ("moonshotai/Kimi-K2.5", None, "int4"),  # native INT4 experts (compressed-tensors)
    ("deepseek-ai/DeepSeek-R1", None, "fp8"),
    ("deepseek-ai/DeepSeek-R1", "bf16", "bf16"),  # a bf16 checkpoint said so
    ("llama3-70b", "nvfp4", "fp4"),
])
def test_a_serve_plan_without_weights_runs_the_checkpoints(hf_id, checkpoint, weights):
    import json

    from typer.testing import CliRunner

    from autotune.cli import app

    args = ["predict", "-p", "tp=8", "--workload", "serve", "-m", hf_id, "-H", "b200-sxm-180gb", "--gpus", "8",
            "--input-len", "1000", "--output-len", "1000", "--concurrency", "16", "--json"]
    result = CliRunner().invoke(app, args + (["--checkpoint", checkpoint] if checkpoint else []))
    assert result.exit_code == 0, result.output
    found = json.loads(result.stdout)
    assert found["plan"]["weights"] == weights
    assert found["estimate"]["weights_from"] == "checkpoint" and "needs_checkpoint" not in found["estimate"]
    assert found["estimate"]["fits"]


def test_an_emitted_plan_without_weights_launches_the_checkpoint_it_names(tmp_path):
    """DeepSeek-R1 ships fp8: `emit tp=8` launches those weights (no --dtype bfloat16 over an fp8 checkpoint, no
    warning that nothing fits)."""
    from typer.testing import CliRunner

    from autotune.cli import app

    result = CliRunner().invoke(app, ["emit", "tp=8", "--format", "vllm", "-m", "deepseek-ai/DeepSeek-R1", "-H",
                                      "h200-sxm-141gb", "--gpus", "8", "--input-len", "1000", "--output-len", "1000",
                                      "--out", str(tmp_path / "out")])
    assert result.exit_code == 0, result.output
    script = (tmp_path / "out" / "serve_vllm.sh").read_text()
    assert "weights=fp8" in script and "read from the fp8 checkpoint" in script
    assert "--dtype bfloat16" not in script and "WARNING" not in script


def test_a_plans_file_entry_without_weights_reads_as_the_checkpoints(tmp_path):
    """explain, emit and report read a plans.json entry that lost its weights (a hand edit) as predict reads a
    --plan without them: the checkpoint's weights, not bf16 over an fp8 checkpoint."""
    import json

    from typer.testing import CliRunner

    from autotune.cli import app

    runner, out = CliRunner(), tmp_path / "s"
    searched = runner.invoke(app, ["search", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", "-H",
                                   "h200-sxm-141gb", "--gpus", "8", "--input-len", "1000", "--output-len", "200",
                                   "--top", "2", "--out", str(out)])
    assert searched.exit_code == 0, searched.output
    doc = json.loads((out / "plans.json").read_text())
    for entry in doc["plans"]:
        assert entry["plan"].pop("weights") == "fp8"
    (out / "plans.json").write_text(json.dumps(doc))
    explained = runner.invoke(app, ["explain", str(out), "--json"])
    assert explained.exit_code == 0, explained.output
    assert json.loads(explained.stdout)["plan"]["weights"] == "fp8"
    emitted = runner.invoke(app, ["emit", str(out), "--format", "vllm", "--out", str(tmp_path / "l")])
    assert emitted.exit_code == 0, emitted.output
    script = (tmp_path / "l" / "serve_vllm.sh").read_text()
    assert "weights=fp8" in script and "--dtype bfloat16" not in script
    reported = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "r"), "--trials", "0"])
    assert reported.exit_code == 0, reported.output
