"""A plan searched on a custom hardware profile (--hardware FILE) is emitted from that profile, not looked up in
the catalogue by its name: a MoE plan's dispatcher and a Blackwell fp8 recipe are read from the hardware, and a
profile whose name is not bundled (or reuses a bundled name with other numbers) still emits."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
PROFILES = Path(__file__).resolve().parent.parent / "profiles" / "hardware"


def _custom(tmp_path: Path, bundled: str, name: str) -> Path:
    text = (PROFILES / f"{bundled}.yaml").read_text(encoding="utf-8")
    lines = [f"name: {name}" if line.startswith("name:") else line for line in text.splitlines()]
    path = tmp_path / f"{name}.yaml"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_moe_fp8_plan_on_a_custom_blackwell_profile_emits_from_it(tmp_path):
    hw = _custom(tmp_path, "b200-sxm-180gb", "myb200")
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "--model", "qwen3-30b-a3b", "--hardware", str(hw), "--gpus", "16",
                                 "--seq-len", "4096", "--global-batch", "256", "--precision", "fp8",
                                 "--out", str(out), "--emit", "megatron,slurm"])
    assert result.exit_code == 0, result.output
    plan = json.loads((out / "plans.json").read_text())["plans"][0]["plan"]
    assert plan["ep"] > 1 and plan["precision"] == "fp8"
    script = (out / "megatron_pretrain_gpt.sh").read_text()
    # a Blackwell GPU (FP4 tensor cores in its peaks) trains fp8 with MXFP8 blocks, whatever the profile's name
    assert "--fp8-recipe mxfp8" in script and "--moe-token-dispatcher-type" in script
    again = runner.invoke(app, ["emit", str(out), "--format", "megatron", "--out", str(tmp_path / "again")])
    assert again.exit_code == 0, again.output
    assert (tmp_path / "again" / "megatron_pretrain_gpt.sh").read_text() == script


def test_a_custom_profile_reusing_a_bundled_name_is_read_not_the_bundled_one(tmp_path):
    """A copy of the H100 profile named like the bundled B200: emitted as the Hopper GPU it describes."""
    hw = _custom(tmp_path, "h100-sxm5-80gb", "b200-sxm-180gb")
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "--model", "qwen3-30b-a3b", "--hardware", str(hw), "--gpus", "16",
                                 "--seq-len", "4096", "--global-batch", "256", "--precision", "fp8",
                                 "--out", str(out), "--emit", "megatron"])
    assert result.exit_code == 0, result.output
    script = (out / "megatron_pretrain_gpt.sh").read_text()
    assert "--fp8-recipe blockwise" in script  # Hopper: DeepSeek's blockwise recipe for a MoE


def test_rtx_pro_6000_trains_fp8_without_mxfp8_which_te_refuses_on_sm_120():
    """TransformerEngine runs MXFP8 on compute capability 10.x only (12.0: 'not supported on 12.0+
    architectures yet'), though the RTX PRO 6000's tensor cores list block-scaled fp8."""
    from autotune.inputs.hardware import load_hardware as bundled_hardware
    from autotune.inputs.modelspec import load_model as bundled_model
    from autotune.outputs.emit.megatron import fp8_recipe

    rtx = bundled_hardware("rtx-pro-6000-blackwell")
    assert rtx.supports("mxfp8") and rtx.compute_capability == 12.0
    assert fp8_recipe(rtx, bundled_model("llama3-8b")) == "delayed"
    assert fp8_recipe(rtx, bundled_model("qwen3-30b-a3b")) == "blockwise"
    for name in ("b200-sxm-180gb", "gb300-nvl72"):
        assert fp8_recipe(bundled_hardware(name), bundled_model("llama3-8b")) == "mxfp8"
    # blockwise needs 9.0 (TE: "FP8 block scaled GEMM requires compute capability 9.0 or higher"): not the L40S
    assert fp8_recipe(bundled_hardware("l40s-48gb"), bundled_model("qwen3-30b-a3b")) == "delayed"
    assert fp8_recipe(bundled_hardware("h100-sxm5-80gb"), bundled_model("qwen3-30b-a3b")) == "blockwise"
    # a profile that does not say (a plans.json written before profiles stated it): what TE runs everywhere
    unstated = dataclasses.replace(bundled_hardware("b200-sxm-180gb"), compute_capability=None)
    assert fp8_recipe(unstated, bundled_model("qwen3-30b-a3b")) == "delayed"


def test_an_older_plans_json_without_compute_capability_emits_delayed_scaling(tmp_path):
    """A plans.json embeds its profile; one written before profiles stated their compute capability must not
    get MXFP8 on an RTX PRO 6000 (TE refuses it at start)."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", "--model", "llama3-8b", "--hardware", "rtx-pro-6000-blackwell", "--gpus",
                                 "8", "--seq-len", "4096", "--global-batch", "64", "--precision", "fp8",
                                 "--out", str(out)])
    assert result.exit_code == 0, result.output
    document = json.loads((out / "plans.json").read_text())
    embedded = document["inputs"]["hardware_profile"]
    assert embedded.pop("compute_capability") == 12.0
    (out / "plans.json").write_text(json.dumps(document), encoding="utf-8")
    emitted = runner.invoke(app, ["emit", str(out), "--format", "megatron", "--out", str(tmp_path / "files")])
    assert emitted.exit_code == 0, emitted.output
    script = (tmp_path / "files" / "megatron_pretrain_gpt.sh").read_text()
    assert "--fp8-recipe delayed" in script and "mxfp8" not in script
    assert "states no compute_capability" in script  # said where the user reads the recipe


def test_a_compute_capability_on_an_amd_profile_is_refused(tmp_path):
    text = (PROFILES / "mi300x-192gb.yaml").read_text(encoding="utf-8")
    path = tmp_path / "mi.yaml"
    path.write_text(text + "compute_capability: 9.0\n", encoding="utf-8")
    result = runner.invoke(app, ["predict", "--model", "llama3-8b", "--hardware", str(path), "--gpus", "8",
                                 "--seq-len", "4096", "--global-batch", "64", "--plan", "tp=1"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "compute_capability" in result.output and "vendor" in result.output
