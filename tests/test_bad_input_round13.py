"""Round 13 of the hostile-input sweep: capacity lists, benchmark results, gpt-oss configs and remedies' numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

ROOT = Path(__file__).resolve().parent.parent
HF = ROOT / "autotune" / "data" / "hf_configs"
CAPACITY = ["-m", "llama3-8b", "--gpus", "8..16", "-s", "4096", "-b", "64", "--tokens", "1e11"]


@pytest.mark.parametrize("hardware", [
    "b200,b200-sxm-180gb",    # an alias beside the name it stands for
    "gb200,gb200-nvl72",
    "{profile},h100-sxm5-80gb",  # the bundled profile's own file beside its name
])
def test_a_capacity_list_naming_one_profile_twice_is_refused(hardware):
    """`-H b200,b200-sxm-180gb` searched the same GPU twice and listed every row twice; only the same name typed
    twice ('h100,h100') was refused."""
    hardware = hardware.format(profile=ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml")
    result = CliRunner().invoke(app, ["search", "-H", hardware, *CAPACITY])
    assert result.exit_code == 2, result.output
    assert "field '--hardware'" in result.output and "each profile may appear once" in result.output
    assert "drop one of them" in result.output and "Traceback" not in result.output


def test_a_capacity_list_of_an_edited_copy_beside_its_bundled_profile_is_still_searched(tmp_path):
    """A copy with other figures is another GPU (the note says it is planned as the file says): both are kept."""
    text = (ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml").read_text().replace("memory_gib: 80", "memory_gib: 96")
    edited = tmp_path / "h100-96.yaml"
    edited.write_text(text)
    result = CliRunner().invoke(app, ["search", "-H", f"{edited},h100-sxm5-80gb", *CAPACITY])
    assert result.exit_code == 0, result.output
    assert "each profile may appear once" not in result.output


def _bench(tmp_path: Path, line: str) -> list[str]:
    script = tmp_path / "bench.py"
    script.write_text(f"print({line!r})\n")
    return [sys.executable, str(script)]


@pytest.mark.parametrize("line", [
    '{"oom": "no", "tokens_per_s_per_gpu": 3000}',   # was recorded as a measurement of 3,000 tokens/s/GPU
    '{"oom": "true", "tokens_per_s_per_gpu": 3000}',  # likewise, though it says the run ran out of memory
    '{"oom": 1}',                                     # was failed for a missing throughput
])
def test_a_benchmark_oom_that_is_not_a_json_boolean_fails_the_trial_naming_it(tmp_path, line):
    from autotune.search.tune import run_benchmark

    measured = run_benchmark(_bench(tmp_path, line), {"tp": 1}, timeout_s=30)
    assert measured.status == "failed", measured
    assert "oom must be true or false" in measured.reason and "but got" in measured.reason


@pytest.mark.parametrize("line, status", [
    ('{"oom": true}', "infeasible"),
    ('{"oom": false, "tokens_per_s_per_gpu": 3000}', "ok"),
    ('{"oom": null, "tokens_per_s_per_gpu": 3000}', "ok"),
])
def test_a_benchmark_oom_boolean_is_still_read(tmp_path, line, status):
    from autotune.search.tune import run_benchmark

    assert run_benchmark(_bench(tmp_path, line), {"tp": 1}, timeout_s=30).status == status
