"""Bad input named in one message, exit status 2, no traceback: numbers, files, flags (issue 14, item 2).

Each case is run as a person would type it, through typer's CliRunner.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
SMALL = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
SERVE = ["--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "512",
         "--output-len", "128"]
PROFILE = (ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text()
SPEC = (ROOT / "profiles" / "models" / "llama3-8b.yaml").read_text()


def invoke(*args: str):
    return runner.invoke(app, [str(a) for a in args])


def assert_user_error(result, *needles: str) -> None:
    """Exit 2, one line on stderr starting with 'error:', naming each needle; no traceback, nothing on stdout."""
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit), result.exception
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:"), lines
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert result.stdout == ""


# --- numbers on the command line: NaN, infinity, overflow ------------------------------------------------

@pytest.mark.parametrize("args, flag", [
    (["search", *SMALL, "--tokens", "nan"], "--tokens"),
    (["search", *SMALL, "--tokens", "inf"], "--tokens"),
    (["search", *SMALL, "--price", "-inf"], "--price"),
    (["predict", *SMALL, "--plan", "tp=1", "--price", "nan"], "--price"),
    (["search", *SMALL, "--gpus", "8..16", "--tokens", "1e12", "--pue", "nan"], "--pue"),
    (["search", *SMALL, "--gpus", "8..16", "--tokens", "1e12", "--grid-intensity", "inf"], "--grid-intensity"),
    (["search", *SMALL[:-2], "-b", "99999999999999999999999"], "--global-batch"),
    (["search", *SMALL[:-4], "-s", "1" + "0" * 30, "-b", "16"], "--seq-len"),
    (["search", *SERVE, "--request-rate", "inf"], "--request-rate"),
    (["search", *SERVE, "--request-rate", "nan"], "--request-rate"),
    (["search", *SERVE, "--ttft-ms", "inf"], "--ttft-ms"),
    (["predict", *SERVE, "--plan", "tp=1", "--tpot-ms", "nan"], "--tpot-ms"),
    (["worker", "--storage", "sqlite:///never.db", "--study", "s", "--wait", "nan"], "--wait"),
    (["worker", "--storage", "sqlite:///never.db", "--study", "s", "--wait", "1e12"], "--wait"),
    (["tune", *SMALL, "--run", "true", "--trial-timeout", "inf"], "--trial-timeout"),
    (["tune", *SMALL, "--run", "true", "--margin", "nan"], "--margin"),
    (["search", *SMALL, "--gpus", "99999999999"], "--gpus"),
    (["search", *SMALL, "--gpus", "8..99999999999", "--tokens", "1e12"], "--gpus"),
    (["search", *SMALL, "--seed", "-1"], "--seed"),
    (["search", *SMALL, "--seed", str(2**32)], "--seed"),
])
def test_non_finite_and_absurd_numbers_on_the_command_line(args, flag, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # nothing may be created here either
    assert_user_error(invoke(*args), flag)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("args", [
    ["search", *SMALL, "--trials", "1000001"],
    ["search", *SMALL, "--sampler", "tpe", "--trials", "2000000"],
    ["tune", *SMALL, "--run", "true", "--trials", "5000000"],
    ["worker", "--storage", "sqlite:///never.db", "--study", "s", "--trials", "5000000"],
])
def test_absurd_trials_are_capped_with_a_reason(args, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert_user_error(invoke(*args), "--trials", "1,000,000")


def test_report_trials_are_capped(tmp_path):
    assert_user_error(invoke("report", str(tmp_path / "plans.json"), "--trials", "99999999", "--out", tmp_path / "r"),
                      "--trials", "10,000")


# --- numbers in files: YAML profiles, specs, spaces, overlays; JSON configs -------------------------------

def profile_with(old: str, new: str) -> str:
    assert old in PROFILE, old
    return PROFILE.replace(old, new, 1)


@pytest.mark.parametrize("text, field", [
    (profile_with("memory_gib: 80", "memory_gib: .nan"), "memory_gib"),
    (profile_with("memory_gib: 80", "memory_gib: .inf"), "memory_gib"),
    (profile_with("memory_gib: 80", "memory_gib: 1.0e+400"), "memory_gib"),
    (profile_with("memory_gib: 80", "memory_gib: 1.0e+200"), "memory_gib"),
    (profile_with("gpus_per_node: 8", "gpus_per_node: 99999999999999999999999"), "gpus_per_node"),
])
def test_non_finite_numbers_in_a_hardware_profile(text, field, tmp_path):
    path = tmp_path / "gpu.yaml"
    path.write_text(text)
    assert_user_error(invoke("search", *SMALL[:2], "-H", path, *SMALL[4:]), "gpu.yaml", field)
    assert_user_error(invoke("hardware", "show", path), "gpu.yaml", field)


@pytest.mark.parametrize("old, new, field", [
    ("n_layers: 32", "n_layers: 1000000000000", "n_layers"),
    ("n_layers: 32", "n_layers: .nan", "n_layers"),
    ("hidden_size: 4096", "hidden_size: 1.0e+400", "hidden_size"),
])
def test_absurd_numbers_in_a_model_spec(old, new, field, tmp_path):
    assert old in SPEC
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace(old, new, 1))
    assert_user_error(invoke("models", "show", path), "spec.yaml", field)


@pytest.mark.parametrize("value", ["NaN", "Infinity", "-Infinity", "1e999", "9" * 5000])
def test_non_finite_numbers_in_an_hf_config(value, tmp_path):
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "llama", "num_hidden_layers": ' + value + ', "hidden_size": 4096, '
                    '"intermediate_size": 14336, "num_attention_heads": 32, "vocab_size": 128256}')
    assert_user_error(invoke("search", "-m", path, *SMALL[2:]), "config.json")


def test_nan_in_a_calibration_overlay(tmp_path):
    path = tmp_path / "calib.yaml"
    path.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: .nan}\n")
    assert_user_error(invoke("search", *SMALL, "--calibration", path), "calib.yaml", "gemm")
    path.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency: {gemm: .inf}\n")
    assert_user_error(invoke("predict", *SMALL, "--plan", "tp=1", "--calibration", path), "calib.yaml", "gemm")


@pytest.mark.parametrize("name, text", [
    ("deep.yaml", "a: " + "[" * 5000 + "]" * 5000 + "\n"),
    ("deep.json", '{"a": ' + "[" * 100_000 + "]" * 100_000 + "}"),
])
def test_deep_nesting_is_an_input_error(name, text, tmp_path):
    path = tmp_path / name
    path.write_text(text)
    assert_user_error(invoke("search", "-m", path, *SMALL[2:]), name, "nested too deeply")


# --- flags that conflict or lack their partner -------------------------------------------------------------

def test_conflicting_fix_values_are_refused():
    assert_user_error(invoke("search", *SMALL, "--fix", "tp=2", "--fix", "tp=4"), "--fix", "tp is fixed twice")
    assert_user_error(invoke("search", *SMALL, "--fix", "tp=2,pp=2", "--fix", "pp=1"), "--fix", "pp is fixed twice")
    assert_user_error(invoke("search", *SERVE, "--fix", "tp=2", "--fix", "tp=4"), "--fix", "tp is fixed twice")
    same = invoke("search", *SMALL, "--fix", "tp=2", "--fix", "tp=2", "--json")
    assert same.exit_code == 0, same.output


def test_study_without_storage(tmp_path):
    assert_user_error(invoke("search", *SMALL, "--study", "s"), "--study", "--storage")
    assert_user_error(invoke("report", "--study", "s", "--out", tmp_path / "r"), "--storage")
    assert not (tmp_path / "r").exists()


@pytest.mark.parametrize("text", ["3m", "1.5m"])
def test_deadline_in_m_is_ambiguous(text):
    assert_user_error(invoke("search", *SMALL, "--gpus", "8..16", "--tokens", "1e9", "--deadline", text),
                      "--deadline", "mo", "min")


def test_deadline_in_minutes_and_months():
    from autotune.search import capacity as cap

    assert cap.parse_duration_days("90min") == pytest.approx(90 / 1440)
    assert cap.parse_duration_days("2mo") == pytest.approx(60)
    assert_user_error(invoke("search", *SMALL, "--gpus", "8..16", "--tokens", "1e9", "--deadline", "1e999d"),
                      "--deadline")
