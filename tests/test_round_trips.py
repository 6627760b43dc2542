"""Every result reads back: search -> explain -> emit -> report, from another directory, training and serving
(issue 14, item 1).  Run in-process through CliRunner, changing the working directory as a person would."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
QWEN3 = ROOT / "tests" / "data" / "hf_configs" / "Qwen3-8B" / "config.json"
PROFILE = ROOT / "profiles" / "hardware" / "h100-sxm5-80gb.yaml"
pytest.importorskip("matplotlib")


def invoke(*args) -> object:
    return runner.invoke(app, [str(a) for a in args])


def ok(*args) -> object:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    return result


@pytest.fixture(scope="module")
def own_model_search(tmp_path_factory):
    """A search on a config.json and a profile YAML of one's own, whose files are then deleted."""
    base = tmp_path_factory.mktemp("own")
    work = base / "work"
    (work / "my-model").mkdir(parents=True)
    shutil.copy(QWEN3, work / "my-model" / "config.json")
    (work / "my-gpu.yaml").write_text(PROFILE.read_text().replace("name: h100-sxm5-80gb", "name: my-gpu", 1)
                                      .replace("memory_gib: 79.1", "memory_gib: 96", 1))
    (work / "space.yaml").write_text((ROOT / "tests" / "bench_scripts" / "space_small.yaml").read_text())
    mp = pytest.MonkeyPatch()
    mp.chdir(work)
    try:
        ok("search", "-m", "my-model/config.json", "-H", "my-gpu.yaml", "--gpus", "8", "-s", "4096", "-b", "16",
           "--space", "space.yaml", "--out", "run")
    finally:
        mp.undo()
    # The original inputs are gone: only the results folder remains, moved elsewhere.
    shutil.rmtree(work / "my-model")
    (work / "my-gpu.yaml").unlink()
    (work / "space.yaml").unlink()
    shutil.move(str(work / "run"), str(base / "run"))
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return base / "run", elsewhere


def test_plans_json_embeds_the_spec_the_profile_and_the_space(own_model_search):
    run, _ = own_model_search
    inputs = json.loads((run / "plans.json").read_text())["inputs"]
    assert inputs["workload"] == "train"
    assert inputs["model_spec"]["n_layers"] == 36 and inputs["model_spec"]["head_dim"] == 128
    assert inputs["hardware_profile"]["name"] == "my-gpu" and inputs["hardware_profile"]["memory_gib"] == 96
    assert inputs["space_spec"]["axes"]["pp"] == [1, 2]
    assert "framework" in inputs  # the hook the framework work fills (null until the cost model takes one)


@pytest.mark.parametrize("as_folder", [False, True], ids=["file", "folder"])
def test_custom_config_survives_explain_from_another_directory(own_model_search, as_folder, monkeypatch):
    run, elsewhere = own_model_search
    monkeypatch.chdir(elsewhere)
    target = run if as_folder else run / "plans.json"
    doc = json.loads(ok("explain", target, "--json").stdout)
    saved = json.loads((run / "plans.json").read_text())["plans"][0]
    assert doc["plan"] == saved["plan"]
    assert doc["estimate"]["tokens_per_s_per_gpu"] == pytest.approx(saved["estimate"]["tokens_per_s_per_gpu"])
    text = ok("explain", target, "--rank", "2").stdout
    assert "my-gpu" in text and "What binds" in text


def test_custom_config_survives_emit_from_another_directory(own_model_search, monkeypatch):
    run, elsewhere = own_model_search
    monkeypatch.chdir(elsewhere)
    ok("emit", run, "--format", "megatron", "--out", "launch")
    script = (elsewhere / "launch" / "megatron_pretrain_gpt.sh").read_text()
    assert "--num-layers 36" in script and "my-gpu" in script
    printed = ok("emit", run / "plans.json", "--format", "slurm", "--framework", "deepspeed").stdout
    assert "#SBATCH" in printed


def test_custom_config_survives_report_from_another_directory(own_model_search, monkeypatch):
    run, elsewhere = own_model_search
    monkeypatch.chdir(elsewhere)
    ok("report", run, "--out", "rep", "--trials", "20")
    pngs = sorted(p.stem for p in (elsewhere / "rep").glob("*.png"))
    assert pngs == sorted(["throughput_memory", "throughput_cost", "step_breakdown", "memory_breakdown",
                           "convergence", "importance"])
    html = (elsewhere / "rep" / "report.html").read_text()
    assert "my-model" in html and "my-gpu" in html and "left out" not in html


def test_round_trip_as_installed_command_from_another_directory(own_model_search, tmp_path):
    """The same round trip through the `autotune` command a user runs (python -m autotune.cli), cwd elsewhere."""
    run, _ = own_model_search
    for args in (["explain", str(run)], ["emit", str(run), "--format", "deepspeed"]):
        done = subprocess.run([sys.executable, "-m", "autotune.cli", *args], cwd=tmp_path, capture_output=True,
                              text=True, timeout=120)
        assert done.returncode == 0, done.stderr
        assert "Traceback" not in done.stderr


def test_an_older_plans_json_without_embedding_still_reads_back_when_its_names_are_bundled(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    ok("search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", "--out", "run")
    doc = json.loads((tmp_path / "run" / "plans.json").read_text())
    for key in ("model_spec", "hardware_profile", "space_spec", "workload", "framework"):
        doc["inputs"].pop(key)
    (tmp_path / "run" / "plans.json").write_text(json.dumps(doc))
    ok("explain", "run")
    ok("emit", "run", "--format", "torchtitan")
    doc["inputs"]["model"] = "my-own-model"
    (tmp_path / "run" / "plans.json").write_text(json.dumps(doc))
    result = invoke("explain", "run")
    assert result.exit_code == 2 and "embeds no spec" in result.stderr and "--model" in result.stderr


# --- serving ---------------------------------------------------------------------------------------

SERVE = ["--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "1024",
         "--output-len", "256", "--ttft-ms", "500", "--tpot-ms", "60"]


@pytest.fixture(scope="module")
def serving_run(tmp_path_factory):
    base = tmp_path_factory.mktemp("serve")
    mp = pytest.MonkeyPatch()
    mp.chdir(base)
    try:
        ok("search", *SERVE, "--out", "srv", "--emit", "vllm,sglang")
    finally:
        mp.undo()
    elsewhere = base / "elsewhere"
    elsewhere.mkdir()
    return base / "srv", elsewhere


def test_serving_search_writes_plans_csv_and_launch_files_next_to_plans_json(serving_run):
    run, _ = serving_run
    assert {p.name for p in run.iterdir()} == {"plans.json", "plans.csv", "serve_vllm.sh", "serve_sglang.sh"}
    doc = json.loads((run / "plans.json").read_text())
    best = doc["plans"][0]["plan"]
    vllm = (run / "serve_vllm.sh").read_text()
    assert f"--tensor-parallel-size {best['tp']}" in vllm and f"--max-num-seqs {best['max_batch']}" in vllm
    # the planned prompt + output (1,024 + 256) with the emitter's slack, never less than planned
    context = int(re.search(r"--max-model-len (\d+)", vllm).group(1))
    assert 1280 <= context <= 2 * 1280 and "prompt + output 1280" in vllm
    rows = (run / "plans.csv").read_text().splitlines()
    assert len(rows) == len(doc["plans"]) + 1 and "ttft_ms" in rows[0]
    bash = shutil.which("bash")
    if bash:
        for name in ("serve_vllm.sh", "serve_sglang.sh"):
            assert subprocess.run([bash, "-n", str(run / name)]).returncode == 0


@pytest.mark.parametrize("fmt", ["vllm", "sglang"])
def test_search_serve_emit_needs_out_and_a_serving_format(fmt, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    result = invoke("search", *SERVE, "--emit", fmt)
    assert result.exit_code == 2 and "--out" in result.stderr
    result = invoke("search", *SERVE, "--emit", "megatron", "--out", "x")
    assert result.exit_code == 2 and "vllm" in result.stderr
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("as_folder", [False, True], ids=["file", "folder"])
def test_serving_result_survives_explain(serving_run, as_folder, monkeypatch):
    run, elsewhere = serving_run
    monkeypatch.chdir(elsewhere)
    target = run if as_folder else run / "plans.json"
    doc = json.loads(ok("explain", target, "--json").stdout)
    saved = json.loads((run / "plans.json").read_text())["plans"][0]
    assert doc["workload"] == "serve" and doc["plan"] == saved["plan"]
    assert doc["estimate"]["output_tokens_per_s"] == pytest.approx(saved["estimate"]["output_tokens_per_s"])
    assert doc["binding"]["kind"] in ("rule", "memory", "targets", "none", "optimum")
    assert {n["axis"] for n in doc["sensitivity"]} >= {"tp", "weights", "kv", "max_batch"}
    text = ok("explain", target, "--rank", "2").stdout
    assert "Serving estimate" in text and "What binds" in text and "time to first token" in text
    refused = invoke("explain", target, "--seq-len", "4096")
    assert refused.exit_code == 2 and "--seq-len" in refused.stderr


def test_serving_result_survives_emit(serving_run, monkeypatch):
    run, elsewhere = serving_run
    monkeypatch.chdir(elsewhere)
    assert ok("emit", run, "--format", "sglang").stdout.count("sglang.launch_server") >= 1
    wrong = invoke("emit", run, "--format", "megatron")
    assert wrong.exit_code == 2 and "vllm" in wrong.stderr


def test_serving_result_survives_report(serving_run, monkeypatch):
    run, elsewhere = serving_run
    monkeypatch.chdir(elsewhere)
    ok("report", run, "--out", "rep")
    pngs = {p.stem for p in (elsewhere / "rep").glob("*.png")}
    assert pngs == {"throughput_interactivity", "throughput_memory", "latency", "memory_breakdown"}
    html = (elsewhere / "rep" / "report.html").read_text()
    assert "serving report" in html and "TTFT" in html and "data:image/png;base64," in html
    # the figures' plans are the search's: as many evaluated and fitting (the batch the KV budget holds included)
    search = json.loads((run / "plans.json").read_text())["search"]
    assert f"fits ({search['feasible']:,} of {search['evaluations']:,})" in html


def test_serving_report_reads_estimate_fields_defensively(serving_run, tmp_path, monkeypatch):
    """A serving estimate that lost a field (the serving model reworked) still reports, without that figure."""
    from autotune.outputs.report.serving import gather_serving, serving_figures

    run, _ = serving_run
    doc = json.loads((run / "plans.json").read_text())
    data = gather_serving(doc, "plans.json")
    for p in data.plans:
        p["estimate"].pop("ttft_ms")
        p["estimate"].pop("tpot_ms")
        p["estimate"].pop("memory_breakdown_gib")
    names = {f.name for f in serving_figures(data)}
    assert "latency" not in names and "memory_breakdown" not in names and "throughput_interactivity" in names
