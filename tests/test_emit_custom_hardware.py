"""A plan searched on a custom hardware profile (--hardware FILE) is emitted from that profile, not looked up in
the catalogue by its name: a MoE plan's dispatcher and a Blackwell fp8 recipe are read from the hardware, and a
profile whose name is not bundled (or reuses a bundled name with other numbers) still emits."""

from __future__ import annotations

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


def test_a_compute_capability_on_an_amd_profile_is_refused(tmp_path):
    text = (PROFILES / "mi300x-192gb.yaml").read_text(encoding="utf-8")
    path = tmp_path / "mi.yaml"
    path.write_text(text + "compute_capability: 9.0\n", encoding="utf-8")
    result = runner.invoke(app, ["predict", "--model", "llama3-8b", "--hardware", str(path), "--gpus", "8",
                                 "--seq-len", "4096", "--global-batch", "64", "--plan", "tp=1"])
    assert result.exit_code != 0 and "Traceback" not in result.output
    assert "compute_capability" in result.output and "vendor" in result.output
