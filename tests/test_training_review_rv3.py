"""Training-path review, round 3: what the DeepSpeed and torchtitan files say of the model's RoPE and router."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()


def _emit(plan: str, model: str, fmt: str, *extra: str, gpus: int = 64) -> str:
    result = runner.invoke(app, ["emit", plan, "-m", model, "-H", "h100-sxm5-80gb", "--gpus", str(gpus), "-s", "4096",
                                 "-b", "512", "--format", fmt, "--allow-no-fit", *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


def _file(output: str, name: str) -> str:
    return output.split(f"# ===== {name} =====\n", 1)[1].split("# ===== ", 1)[0]


def test_deepspeed_autoep_states_the_deepseek_router():
    """ds_config.json's expert_parallel held only enabled and autoep_size: AutoEP reads group-limited routing from a
    model's config.json only in its DeepSeek-V3 preset, so a custom MoE with DeepSeek's router would have routed over
    all experts; the file now states the router the plan was made for, in AutoEP's own keys."""
    out = _emit("ep=8,zero=1,recompute=full", "deepseek-v3", "deepspeed", "--framework", "deepspeed", gpus=256)
    section = json.loads(_file(out, "ds_config.json"))["expert_parallel"]
    assert section == {"enabled": True, "autoep_size": 8, "top_k": 8, "score_func": "sigmoid", "num_expert_groups": 8,
                       "num_limited_groups": 4, "routed_scaling_factor": 2.5, "load_balance_coeff": None}
    script = _file(out, "deepspeed_launch.sh")
    assert "# RoPE (theta 10000, yarn scaling) is the model code's" in script
    assert "AutoEP does not run it (load_balance_coeff null" in script


def test_deepspeed_autoep_states_a_softmax_router_without_groups():
    out = _emit("ep=8,zero=1,recompute=full", "mixtral-8x7b", "deepspeed", "--framework", "deepspeed")
    section = json.loads(_file(out, "ds_config.json"))["expert_parallel"]
    assert section == {"enabled": True, "autoep_size": 8, "top_k": 2, "score_func": "softmax",
                       "load_balance_coeff": None}
    script = _file(out, "deepspeed_launch.sh")
    assert "# RoPE (theta 1000000) is the model code's" in script
    assert "Load balancing: the model's own auxiliary loss" in script


def test_deepspeed_dense_files_say_where_rope_comes_from():
    out = _emit("zero=3", "llama3.1-70b", "deepspeed", "--framework", "deepspeed")
    assert "expert_parallel" not in _file(out, "ds_config.json")
    assert "# RoPE (theta 500000, llama3 scaling) is the model code's" in _file(out, "deepspeed_launch.sh")


def test_torchtitan_module_says_its_flavour_rope_differs_from_llama3():
    """torchtitan's Llama 3 flavours all apply Llama 3.1's RoPE scaling in model code, and Llama 3 (8B, 70B) has none:
    the module said nothing, so a continued pretraining of Llama 3 ran with other rotary frequencies unremarked."""
    llama3 = _file(_emit("tp=8,zero=3", "llama3-70b", "torchtitan"), "autotune_torchtitan.py")
    assert "# RoPE is torchtitan's model code" in llama3 and "llama3-70b has RoPE theta 500000, no scaling." in llama3
    assert "Llama 3.1's frequency scaling, unlike llama3-70b" in llama3
    llama31 = _file(_emit("tp=8,zero=3", "llama3.1-70b", "torchtitan"), "autotune_torchtitan.py")
    assert "llama3.1-70b has RoPE theta 500000, llama3 scaling." in llama31
    assert "unlike" not in llama31


def test_torchtitan_moe_module_names_the_router_its_model_code_builds():
    module = _file(_emit("ep=8,zero=3,recompute=full", "deepseek-v3", "torchtitan", gpus=256), "autotune_torchtitan.py")
    assert ("deepseek-v3 has RoPE theta 10000, yarn scaling; router top-8 sigmoid within 4 of 8 groups, weights scaled "
            "by 2.5, dropless") in module


def test_torchtitan_deepseek_with_context_parallelism_is_refused(tmp_path):
    """The torchtitan module for DeepSeek-V3 builds flex attention (as torchtitan's 671B config does), and torchtitan's
    DeepSeek-V3 refuses context parallelism with any attention but SDPA when the trainer builds the model: emit wrote
    context_parallel_degree 2 and a `search --emit torchtitan` at 64k tokens ranked such plans first."""
    args = ["-m", "deepseek-v3", "-H", "h100-sxm5-80gb", "--gpus", "256", "-s", "32768", "-b", "256"]
    refused = runner.invoke(app, ["emit", "cp=2,ep=8,zero=3,recompute=full", *args, "--format", "torchtitan",
                                  "--allow-no-fit"])
    assert refused.exit_code == 2, refused.output
    assert "plan field cp=2: torchtitan's DeepSeek-V3 runs context parallelism only with SDPA" in refused.output
    found = runner.invoke(app, ["search", *args, "--framework", "torchtitan", "--emit", "torchtitan", "--top", "3",
                                "--out", str(tmp_path / "s"), "--json"])
    assert found.exit_code == 0, found.output
    plans = json.loads(found.stdout)["plans"]
    assert plans and all(p["plan"]["cp"] == 1 for p in plans)
    # Qwen3-30B-A3B keeps context parallelism (torchtitan's Qwen3 has no such rule)
    _emit("cp=2,ep=8,zero=3,recompute=full", "qwen3-30b-a3b", "torchtitan")
