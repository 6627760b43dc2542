"""Round 15 of the hostile-input sweep: misspelt keys, plan strings that name a file, latency targets and prices near
zero, scale-up domains no fabric builds, Hugging Face keys read without a check, and RoPE settings that rotate
nothing."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
import yaml

from tests.test_bad_input import assert_user_error, invoke

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "tests" / "data" / "hf_configs"
TRAIN = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "64"]
SERVE = ["--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "512",
         "--output-len", "128"]


# --- unknown keys in our own YAML files name the key they most likely misspell ---------------------------------

@pytest.mark.parametrize("kind, path, edit, says", [
    ("models", "profiles/models/llama3-8b.yaml", lambda d: d.update(n_layer=d.pop("n_layers")),
     "unknown key(s) n_layer (did you mean n_layers?)"),
    ("models", "profiles/models/mixtral-8x7b.yaml", lambda d: d["moe"].update(top_kk=2),
     "unknown key(s) moe.top_kk (did you mean moe.top_k?)"),
    ("hardware", "profiles/hardware/h100-sxm5-80gb.yaml", lambda d: d.update(memory_gb=d.pop("memory_gib")),
     "unknown key(s) memory_gb (did you mean memory_gib?)"),
    ("hardware", "profiles/hardware/h100-sxm5-80gb.yaml", lambda d: d["efficiency"].update(gem=0.7),
     "unknown key(s) efficiency.gem (did you mean efficiency.gemm?)"),
])
def test_an_unknown_key_in_a_spec_or_profile_names_the_key_it_misspells(tmp_path, kind, path, edit, says):
    """The message listed thirty allowed keys, in which a one-letter slip (n_layer for n_layers) is hard to see."""
    data = yaml.safe_load((ROOT / path).read_text())
    edit(data)
    data["name"] = "mine"
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(data))
    assert_user_error(invoke(kind, "show", tmp_path / "f.yaml"), "f.yaml", says, "allowed:")


def test_an_unknown_key_far_from_any_is_named_without_a_guess(tmp_path):
    data = yaml.safe_load((ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text())
    data["colour"] = "red"
    (tmp_path / "f.yaml").write_text(yaml.safe_dump(data))
    result = invoke("models", "show", tmp_path / "f.yaml")
    assert_user_error(result, "unknown key(s) colour;")
    assert "did you mean" not in result.stderr


@pytest.mark.parametrize("text, says", [
    ("hardwre: {}\n", "unknown key(s) hardwre (did you mean hardware?)"),
    ("hardware:\n  h100-sxm5-80gb:\n    efficiency:\n      gem: 0.7\n", "gem (did you mean gemm?)"),
])
def test_a_calibration_overlay_key_misspelt_is_named_with_its_guess(tmp_path, text, says):
    (tmp_path / "c.yaml").write_text(text)
    assert_user_error(invoke("search", *TRAIN, "--calibration", tmp_path / "c.yaml"), "c.yaml", says)


def test_a_key_an_hf_config_holds_that_no_reader_uses_is_left_alone(tmp_path):
    """HF configs carry many keys autotune does not read (norm_topk_prob renormalises router weights: no shape, no
    cost): a value there is transformers' business, not a reason to refuse the model."""
    config = json.loads((HF / "Qwen3-30B-A3B" / "config.json").read_text())
    config.update(norm_topk_prob="banana", output_router_logits=[1, 2])
    (tmp_path / "config.json").write_text(json.dumps(config))
    assert invoke("models", "show", tmp_path / "config.json").exit_code == 0


# --- a plan string that is also a file's name ---------------------------------------------------------------

@pytest.mark.parametrize("kind", ["file", "folder"])
def test_emit_refuses_a_plan_string_that_also_names_a_file_here(tmp_path, kind):
    """`emit tp=2` beside a file named tp=2 read the file as a plans.json ("is not JSON"), where the same command a
    folder over wrote the plan's launch file: the words read two ways and neither is guessed."""
    (tmp_path / "tp=2").mkdir() if kind == "folder" else (tmp_path / "tp=2").write_text("{}")
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = invoke("emit", "tp=2", *TRAIN)
        assert_user_error(result, "field 'PLAN'", "reads two ways", f"the {kind} 'tp=2'", "--plan tp=2",
                          f"./tp=2 for the {kind}")
        assert invoke("emit", "--plan", "tp=2", *TRAIN).exit_code == 0
        assert_user_error(invoke("emit", "./tp=2"), "tp=2")  # the file, read (and refused) as a plans.json
    finally:
        os.chdir(cwd)


def test_emit_reads_a_plan_string_where_no_file_has_its_name(tmp_path):
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = invoke("emit", "tp=2", *TRAIN)
        assert result.exit_code == 0 and "--tensor-model-parallel-size 2" in result.stdout, result.output
    finally:
        os.chdir(cwd)


# --- numbers near zero or past any machine ------------------------------------------------------------------

@pytest.mark.parametrize("flag, value", [("--ttft-ms", "1e-308"), ("--tpot-ms", "0.001"), ("--ttft-ms", "1e9")])
@pytest.mark.parametrize("command", [["search", *SERVE, "--top", "1"], ["predict", *SERVE, "-p", "tp=1"],
                                     ["emit", "tp=1", "-f", "vllm", *SERVE[2:]]])
def test_a_latency_target_no_step_could_meet_or_bind_is_refused(command, flag, value):
    """--ttft-ms 1e-308 was searched and every plan reported as missing it (TTFT 697 > 1e-308 ms); emit wrote the
    launch file with the note."""
    assert_user_error(invoke(*command, flag, value), f"field '{flag}'", f"0.01 <= {flag} <= 86,400,000 ms must hold",
                      f"({flag}={float(value):g})")


def test_the_tightest_plausible_latency_target_is_still_searched():
    result = invoke("search", *SERVE, "--ttft-ms", "0.01", "--top", "1")
    assert result.exit_code == 1 and "TTFT" in result.output and "0.01 ms" in result.output, result.output


@pytest.mark.parametrize("value", ["1e-308", "0.001", "0.0008"])  # 0.0008: $2.99 an hour given per second
@pytest.mark.parametrize("command", [["search", *TRAIN, "--top", "1"], ["predict", *SERVE, "-p", "tp=1"]])
def test_a_price_below_any_gpus_rent_is_refused(command, value):
    """--price 1e-308 priced every plan at $0.000 per million tokens."""
    assert_user_error(invoke(*command, "--price", value), "field '--price'", "--price = 0 or --price >= 0.01",
                      "not a second or a minute")


@pytest.mark.parametrize("value", ["0", "0.01"])
def test_a_price_of_zero_or_a_cent_is_still_taken(value):
    assert invoke("predict", *SERVE, "-p", "tp=1", "--price", value).exit_code == 0


def _profile(tmp_path: Path, source: str, **changes) -> Path:
    data = {**yaml.safe_load((ROOT / "profiles" / "hardware" / f"{source}.yaml").read_text()), "name": "mine",
            **changes}
    path = tmp_path / "gpu.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def test_a_profile_price_below_any_rent_is_refused(tmp_path):
    path = _profile(tmp_path, "h100-sxm5-80gb", price_usd_per_gpu_hour=1e-308)
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", "field 'price_usd_per_gpu_hour'",
                      "price_usd_per_gpu_hour >= 0.01 USD must hold")


@pytest.mark.parametrize("changes, field", [
    ({"scale_up_domain_gpus": 100_000}, "scale_up_domain_gpus"),      # was planned: 100,000 GPUs at NVLink speed
    ({"gpus_per_node": 100_000, "scale_up_domain_gpus": None}, "gpus_per_node"),
])
def test_a_scale_up_domain_no_fabric_builds_is_refused(tmp_path, changes, field):
    path = _profile(tmp_path, "gb200-nvl72", **changes)
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", f"field '{field}'", "must be <= 65,536 GPUs")
    assert_user_error(invoke("search", *TRAIN, "--gpus-per-node", "100000"), "--gpus-per-node", "<= 65,536")


def test_the_largest_real_scale_up_domain_is_still_planned(tmp_path):
    path = _profile(tmp_path, "gb200-nvl72", scale_up_domain_gpus=576)  # an NVL576 rack
    result = invoke("search", "-m", "llama3-8b", "-H", path, "--gpus", "576", "-s", "4096", "-b", "576", "--top", "1")
    assert result.exit_code == 0, result.output


# --- Hugging Face keys that are read, checked as they are read -----------------------------------------------

def _config(tmp_path: Path, model: str, **fields) -> Path:
    config = json.loads((HF / model / "config.json").read_text())
    (config["text_config"] if "text_config" in config else config).update(fields)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config))
    return path


@pytest.mark.parametrize("model, fields, field, says", [
    # "banana" was planned as a softmax router, 5 as no bias balancing, "false" as a sliding window
    ("DeepSeek-V3", {"scoring_func": "banana"}, "scoring_func", "must be one of softmax, sigmoid"),
    ("Mixtral-8x7B-v0.1", {"scoring_func": ["sigmoid"]}, "scoring_func", "must be one of softmax, sigmoid"),
    ("DeepSeek-V3", {"topk_method": 5}, "topk_method", "must be one of greedy, group_limited_greedy, noaux_tc"),
    ("DeepSeek-V3", {"rope_parameters": "banana"}, "rope_parameters", "must be a mapping"),
    ("Qwen3-8B", {"sliding_window": 4096, "use_sliding_window": "false"}, "use_sliding_window", "true or false"),
    # these raised a TypeError traceback
    ("MiniMax-M2.5", {"attn_type_list": 5}, "attn_type_list", "must be a list"),
    ("GLM-5", {"indexer_types": [["full"]]}, "indexer_types", "cannot be expressed"),
    ("GLM-5", {"index_topk_freq": [["x"]]}, "index_topk_freq", "cannot be expressed"),
    ("Qwen3.5-397B-A17B", {"mamba_ssm_dtype": ["float32"]}, "mamba_ssm_dtype", "must be float32"),
    ("Qwen3.5-397B-A17B", {"mamba_ssm_dtype": {}}, "mamba_ssm_dtype", "must be float32"),
])
def test_an_hf_key_that_is_read_is_refused_when_it_is_not_what_hf_writes(tmp_path, model, fields, field, says):
    assert_user_error(invoke("models", "show", _config(tmp_path, model, **fields)), "config.json",
                      f"field '{field}'", says)


@pytest.mark.parametrize("model, fields, score", [
    ("DeepSeek-V3", {}, "sigmoid"),
    ("DeepSeek-V3", {"scoring_func": "softmax", "topk_method": "greedy"}, "softmax"),
    ("DeepSeek-V3", {"scoring_func": None, "topk_method": None}, "softmax"),
])
def test_router_settings_as_hf_writes_them_are_read(tmp_path, model, fields, score):
    from autotune.inputs.modelspec import load_model

    assert load_model(str(_config(tmp_path, model, **fields))).moe.router_score == score


def test_a_dense_models_router_keys_are_not_read(tmp_path):
    """A dense model has no router: its scoring_func is no key of its shapes, and passes as other unread keys do."""
    assert invoke("models", "show", _config(tmp_path, "Meta-Llama-3-8B", scoring_func="banana")).exit_code == 0


def test_a_qwen_sliding_window_switched_on_as_a_boolean_still_slides(tmp_path):
    from autotune.inputs.modelspec import load_model

    spec = load_model(str(_config(tmp_path, "Qwen3-8B", sliding_window=4096, use_sliding_window=True,
                                  max_window_layers=30)))
    assert spec.sliding_window == 4096 and spec.layer_kinds.count("sliding") == 6


# --- RoPE settings that rotate nothing ---------------------------------------------------------------------

@pytest.mark.parametrize("model, fields, field, says", [
    ("Meta-Llama-3-8B", {"rope_theta": 1e-308}, "rope_theta", "must be > 1"),
    ("Meta-Llama-3-8B", {"rope_theta": 1}, "rope_theta", "must be > 1"),
    ("Meta-Llama-3-8B", {"partial_rotary_factor": 1e-308}, "partial_rotary_factor", "at least one pair"),
    ("MiniMax-M2.5", {"rotary_dim": 1}, "rotary_dim", "at least one pair"),
])
def test_an_hf_rope_that_rotates_nothing_is_refused(tmp_path, model, fields, field, says):
    """rope_theta 1e-308 and partial_rotary_factor 1e-308 were read and written into Megatron's launch file."""
    assert_user_error(invoke("models", "show", _config(tmp_path, model, **fields)), "config.json", f"field '{field}'",
                      says)


@pytest.mark.parametrize("fields, says", [
    ({"rope_theta": 1e-308}, "rope_theta > 1 must hold"),
    ({"rotary_percent": 1e-308}, "rotary_percent * head_dim >= 2 must hold"),
])
def test_a_spec_rope_that_rotates_nothing_is_refused(tmp_path, fields, says):
    data = {**yaml.safe_load((ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text()), **fields}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(data))
    assert_user_error(invoke("models", "show", tmp_path / "spec.yaml"), "spec.yaml", says)


def test_a_partial_rope_is_still_read(tmp_path):
    from autotune.inputs.modelspec import load_model

    assert load_model(str(_config(tmp_path, "Meta-Llama-3-8B", partial_rotary_factor=0.5))).rotary_percent == 0.5


# --- a file destination that is a link looping on itself --------------------------------------------------

def test_tune_calibrate_into_a_link_that_loops_is_refused_without_a_traceback(tmp_path):
    """`ln -s loop loop; autotune tune ... --calibrate loop` raised RuntimeError('Symlink loop') from Path.resolve."""
    loop = tmp_path / "loop"
    loop.symlink_to(loop)
    result = invoke("tune", "--run", "true", *TRAIN, "--trials", "1", "--calibrate", loop)
    assert_user_error(result, "loop", "exists; choose another --calibrate")


# --- an error quotes what was typed, control characters escaped ----------------------------------------------

@pytest.mark.parametrize("args, quoted", [
    (["search", *TRAIN, "--objective", "\x1b[2Jx"], "\\x1b[2Jx"),   # cleared the terminal
    (["search", *TRAIN, "--objective", "a\nb"], "a\\nb"),          # split the one line of the error in two
    (["search", *TRAIN, "--space", "x\x1b]0;title\x07"], "x\\x1b]0;title\\x07"),  # a path: retitled the window
])
def test_an_error_quoting_a_control_character_writes_its_escape(args, quoted):
    result = invoke(*args)
    assert_user_error(result, quoted)
    assert "\x1b" not in result.stderr and "\x07" not in result.stderr


# --- a framework profile's sections of the wrong type --------------------------------------------------------

@pytest.mark.parametrize("key, value", [("releases", 0), ("releases", []), ("releases", ""), ("changes", 0),
                                        ("changes", {}), ("changes", False)])
def test_a_framework_section_that_is_not_its_kind_is_refused(tmp_path, key, value):
    """`changes: {}` (or 0, false) was read as no changes: Megatron-LM was planned with its oldest traits, without
    a word; `releases: 0` likewise as no releases."""
    data = {**yaml.safe_load((ROOT / "profiles" / "frameworks" / "megatron-lm.yaml").read_text()), "name": "mine",
            key: value}
    (tmp_path / "fw.yaml").write_text(yaml.safe_dump(data))
    result = invoke("predict", *TRAIN, "-p", "tp=2", "--framework", tmp_path / "fw.yaml")
    assert_user_error(result, "fw.yaml", f"field '{key}'", "must")


@pytest.mark.parametrize("changes", [{"releases": None}, {"releases": {}}, {"changes": None}])
def test_a_framework_section_left_empty_still_means_none(tmp_path, changes):
    data = {**yaml.safe_load((ROOT / "profiles" / "frameworks" / "megatron-lm.yaml").read_text()), "name": "mine",
            **changes}
    (tmp_path / "fw.yaml").write_text(yaml.safe_dump(data))
    result = invoke("predict", *TRAIN, "-p", "tp=2", "--framework", tmp_path / "fw.yaml")
    assert result.exit_code in (0, 1) and "error:" not in result.output, result.output  # read, the plan estimated


# --- a study name is printed back by every worker and report ------------------------------------------------

@pytest.mark.parametrize("name", ["a\nb", "x\x1b[2Jy", "tab\there"])
@pytest.mark.parametrize("command", [
    ["search", *TRAIN, "--sampler", "random", "--trials", "2"],
    ["tune", "--run", "true", *TRAIN, "--trials", "1"],
    ["worker", "--trials", "1"],
    ["report", "--out", "r"],
])
def test_a_study_name_with_a_control_character_is_refused(tmp_path, command, name):
    """`--study $'a\\nb'` created a study whose name split every line that quoted it (as model names did)."""
    result = invoke(*command, "--storage", f"sqlite:///{tmp_path / 's.db'}", "--study", name)
    assert_user_error(result, "field '--study'", "control character")
    assert not (tmp_path / "s.db").exists()


# --- a profile's power and host speed near zero --------------------------------------------------------------

@pytest.mark.parametrize("changes, field, says", [
    ({"average_power_w": 1e-308}, "average_power_w", "must be >= 1 W"),    # reported 0 MWh and 0 t CO2e
    ({"average_power_w": 0.532}, "average_power_w", "must be >= 1 W"),     # 532 W given in kW
    ({"tdp_w": 0.7, "average_power_w": 0.5}, "tdp_w", "must be >= 1 W"),
    ({"host_op_scale": 1e-308}, "host_op_scale", "must be >= 0.1"),        # made every host op free
])
def test_a_profile_power_or_host_speed_near_zero_is_refused(tmp_path, changes, field, says):
    path = _profile(tmp_path, "h100-sxm5-80gb", **changes)
    for command in (["hardware", "show", path],
                    ["search", "-m", "llama3-8b", "-H", path, "--gpus", "8..16", "-s", "4096", "-b", "64", "--tokens",
                     "1e11", "--top", "1"]):
        assert_user_error(invoke(*command), "gpu.yaml", f"field '{field}'", says)


def test_every_bundled_profile_states_a_plausible_power_and_host_speed():
    for path in sorted((ROOT / "profiles" / "hardware").glob("*.yaml")):
        assert invoke("hardware", "show", path).exit_code == 0, path


@pytest.mark.parametrize("value", ["0.475", "1e-308"])
def test_a_grid_intensity_in_kilograms_is_refused(value):
    """--grid-intensity 0.475 (the world average in kg per kWh) printed emissions a thousand times too low."""
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8..16", "-s", "4096", "-b", "64",
                    "--tokens", "1e11", "--grid-intensity", value, "--top", "1")
    assert_user_error(result, "field '--grid-intensity'", "--grid-intensity = 0 or --grid-intensity >= 1",
                      "not kilograms")


@pytest.mark.parametrize("value", ["0", "1", "475"])
def test_a_grid_intensity_in_grams_or_zero_is_still_taken(value):
    result = invoke("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8..16", "-s", "4096", "-b", "64",
                    "--tokens", "1e11", "--grid-intensity", value, "--top", "1")
    assert result.exit_code == 0, result.output
