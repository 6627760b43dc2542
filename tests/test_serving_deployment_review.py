"""Serving review from a deployment engineer's side: launch files that start the weights the plan was sized for."""

from __future__ import annotations

import json

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()

NVFP4_PLAN = "dp=8,ep=8,weights=fp4,kv=fp8,max_batch=256"


def _emit(model: str, engine: str, *extra: str) -> str:
    result = runner.invoke(app, ["emit", NVFP4_PLAN, "-f", engine, "-m", model, "-H", "b200-sxm-180gb", "--gpus", "8",
                                 "--input-len", "1024", "--output-len", "1024", *extra])
    assert result.exit_code == 0, result.output
    return result.stdout


def _model_line(script: str) -> str:
    return next(line for line in script.splitlines() if "MODEL:-" in line)


def test_a_plan_that_needs_another_checkpoint_does_not_load_the_ids_weights():
    """deepseek-ai/DeepSeek-R1's published weights are FP8; an NVFP4 plan of it needs an NVFP4 checkpoint, and its
    memory flag is sized for 4-bit experts (69.6 GiB of weights a GPU at DP8 EP8, where the FP8 ones are 93.8).  The
    script defaulted MODEL to the FP8 id, so run as written it loaded the FP8 weights into the FP4 budget; it now stops
    until MODEL names NVFP4 weights, and names an NVFP4 id of the architecture the catalogue records."""
    for engine in ("vllm", "sglang"):
        line = _model_line(_emit("deepseek-ai/DeepSeek-R1", engine))
        assert "MODEL=deepseek-ai/DeepSeek-R1;" not in line and "exit 2" in line, line
        assert "NVFP4" in line and "MODEL=nvidia/DeepSeek-R1-NVFP4" in line, line
    # a bundled name with --checkpoint fp8: the example is NVFP4 weights, not the FP8 deepseek-ai/DeepSeek-V3
    line = _model_line(_emit("deepseek-v3", "vllm", "--checkpoint", "fp8"))
    assert "MODEL=deepseek-ai/DeepSeek-V3)" not in line and "MODEL=nvidia/DeepSeek-R1-NVFP4" in line, line
    # the plan that runs from the id's own weights still loads them
    result = runner.invoke(app, ["emit", "dp=8,ep=8,kv=fp8,max_batch=256", "-f", "vllm", "-m", "deepseek-ai/DeepSeek-R1",
                                 "-H", "b200-sxm-180gb", "--gpus", "8", "--input-len", "1024", "--output-len", "1024"])
    assert result.exit_code == 0, result.output
    assert "MODEL=deepseek-ai/DeepSeek-R1;" in _model_line(result.stdout)


def test_search_emit_of_a_plan_that_needs_another_checkpoint_asks_for_model(tmp_path):
    """The same through `search --emit`: the best plan (FP4 pinned) needs an NVFP4 checkpoint of an FP8 id."""
    out = tmp_path / "r1"
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", "-H",
                                 "b200-sxm-180gb", "--gpus", "8", "--input-len", "1024", "--output-len", "1024",
                                 "--fix", "weights=fp4", "--fix", "mode=agg", "--top", "1", "--out", str(out),
                                 "--emit", "vllm,sglang"])
    assert result.exit_code in (0, 1), result.output
    best = json.loads((out / "plans.json").read_text())["plans"][0]
    assert best["plan"]["weights"] == "fp4" and "needs_checkpoint" in best["estimate"]
    for name in ("serve_vllm.sh", "serve_sglang.sh"):
        line = _model_line((out / name).read_text())
        assert "MODEL=deepseek-ai/DeepSeek-R1;" not in line and "MODEL=nvidia/DeepSeek-R1-NVFP4" in line, line


def test_a_hugging_face_id_labels_the_serving_outputs(tmp_path):
    """A model given as a Hugging Face id is planned with the bundled spec of its architecture (DeepSeek-R1 as
    deepseek-v3), but search, predict, explain, emit and report name it by the id the user gave, not the spec."""
    from autotune.outputs.report.serving import gather_serving

    out = tmp_path / "r1"
    common = ["-H", "h200-sxm-141gb", "--gpus", "8", "--input-len", "1024", "--output-len", "1024"]
    found = runner.invoke(app, ["search", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", *common,
                                "--fix", "mode=agg", "--fix", "dp=8", "--top", "2", "--out", str(out),
                                "--emit", "vllm"])
    assert found.exit_code == 0, found.output
    assert found.stdout.startswith("deepseek-ai/DeepSeek-R1 serving on 8 x h200-sxm-141gb"), found.stdout[:200]
    assert "# model: deepseek-ai/DeepSeek-R1; hardware" in (out / "serve_vllm.sh").read_text()
    explained = runner.invoke(app, ["explain", str(out)])
    assert explained.exit_code == 0, explained.output
    assert explained.stdout.startswith("deepseek-ai/DeepSeek-R1 serving on"), explained.stdout[:200]
    emitted = runner.invoke(app, ["emit", str(out), "-f", "sglang"])
    assert emitted.exit_code == 0, emitted.output
    assert "# model: deepseek-ai/DeepSeek-R1; hardware" in emitted.stdout
    document = json.loads((out / "plans.json").read_text())
    assert gather_serving(document, str(out)).title.startswith("deepseek-ai/DeepSeek-R1 serving on")
    predicted = runner.invoke(app, ["predict", "--workload", "serve", "-m", "deepseek-ai/DeepSeek-R1", *common,
                                    "-p", "dp=8,ep=8,max_batch=256"])
    assert predicted.exit_code == 0, predicted.output
    assert predicted.stdout.startswith("deepseek-ai/DeepSeek-R1 on 8 x h200-sxm-141gb"), predicted.stdout[:200]
    # a bundled name is still named by the spec
    bundled = runner.invoke(app, ["predict", "--workload", "serve", "-m", "deepseek-v3", "--checkpoint", "fp8", *common,
                                  "-p", "dp=8,ep=8,max_batch=256"])
    assert bundled.exit_code == 0 and bundled.stdout.startswith("deepseek-v3 on 8 x"), bundled.output


def test_a_config_folder_gone_since_the_search_is_not_loaded_as_a_hub_id(tmp_path, monkeypatch):
    """A search of a model given as a folder holding its config.json records that path; `emit` of its plans.json on
    another machine, or after the folder moved, read the path as a Hugging Face id and defaulted MODEL to it, so the
    engine would try to download a repository named cfgs/qwen3 from the Hub.  The script asks for MODEL instead."""
    from pathlib import Path

    monkeypatch.chdir(tmp_path)
    folder = Path("cfgs") / "qwen3"
    folder.mkdir(parents=True)
    source = Path(__file__).resolve().parent / "data" / "hf_configs" / "Qwen3-30B-A3B" / "config.json"
    (folder / "config.json").write_text(source.read_text())
    result = runner.invoke(app, ["search", "--workload", "serve", "-m", "cfgs/qwen3", "-H", "h100-sxm5-80gb", "--gpus",
                                 "2", "--input-len", "1024", "--output-len", "256", "--top", "1", "--out", "found"])
    assert result.exit_code == 0, result.output
    folder.rename("elsewhere")
    for engine in ("vllm", "sglang"):
        emitted = runner.invoke(app, ["emit", "found", "-f", engine])
        assert emitted.exit_code == 0, emitted.output
        line = _model_line(emitted.stdout)
        assert "MODEL=cfgs/qwen3" not in line and "exit 2" in line, line
    # a catalogue id still loads by default
    result = runner.invoke(app, ["emit", "tp=2,max_batch=64", "-f", "vllm", "-m", "Qwen/Qwen3-30B-A3B", "-H",
                                 "h100-sxm5-80gb", "--gpus", "2", "--input-len", "1024", "--output-len", "256"])
    assert result.exit_code == 0, result.output
    assert "MODEL=Qwen/Qwen3-30B-A3B;" in _model_line(result.stdout)


def test_the_cross_replica_hand_off_note_only_where_replicas_span_nvlink_domains():
    """One router pairs any prefill server with any decode server, so a KV hand-off may leave its replica; the script
    warned that it then crosses the network where the estimate priced NVLink.  In one GB200 NVL72 rack every GPU is on
    one NVLink domain, which the estimate prices (its hand-off rides NVLink when the system is inside the domain), so
    the warning was wrong there; it stays for HGX nodes, and for racks beyond one."""
    disagg = ("prefill_workers=1,prefill_dp=8,prefill_ep=8,decode_workers=1,decode_dp=8,decode_ep=8,"
              "weights=fp8,kv=fp8,max_batch=512")

    def emitted(hardware: str, gpus: int, plan: str, model: str = "deepseek-v3") -> str:
        result = runner.invoke(app, ["emit", plan, "-f", "sglang", "-m", model, "--checkpoint", "fp8", "-H",
                                     hardware, "--gpus", str(gpus), "--input-len", "2048", "--output-len", "1024"])
        assert result.exit_code == 0, result.output
        return result.stdout

    note = "NOTE: the router pairs any prefill server"
    assert note not in emitted("gb200-nvl72", 64, disagg)  # 4 replicas of 16 GPUs, all in one rack
    assert note in emitted("gb200-nvl72", 144, disagg)  # 9 replicas over two racks
    hgx = "prefill_workers=1,prefill_tp=4,decode_workers=1,decode_tp=4,weights=fp8,max_batch=64"
    assert note in emitted("h100-sxm5-80gb", 16, hgx, "llama3-70b")  # 2 replicas of one node each
