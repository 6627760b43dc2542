"""The command line end to end, through typer's CliRunner: JSON contracts, files, help, errors."""

from __future__ import annotations

import csv
import importlib.util
import json
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from autotune.cli import app
from autotune.inputs.hardware import hardware_names
from autotune.inputs.modelspec import model_names
from autotune.training.plan import PLAN_KEYS

runner = CliRunner()
HF_QWEN3 = Path(__file__).parent / "data" / "hf_configs" / "Qwen3-8B" / "config.json"

# A small problem: llama3-8b on one node of 8 H100s; exact search over the whole space takes milliseconds.
SMALL = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
GPT3_PLAN = "tp=8,pp=16,cp=1,ep=1,vp=1,sp=true,zero=1,mbs=1,recompute=full,precision=bf16"
GPT3 = ["-m", "gpt3-175b", "-H", "a100-sxm4-80gb", "--gpus", "1024", "-s", "2048", "-b", "1536"]

ESTIMATE_KEYS = {"step_time_s", "tokens_per_s_per_gpu", "tflops_per_gpu", "mfu", "memory_gib_per_gpu", "fits",
                 "time_breakdown_s", "memory_breakdown_gib"}


def invoke(*args: str):
    return runner.invoke(app, list(args))


def ok_json(*args: str) -> dict:
    result = invoke(*args)
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)  # stdout holds the JSON and nothing else


# --- search --json --------------------------------------------------------------------------

@pytest.fixture(scope="module")
def search_doc() -> dict:
    return ok_json("search", *SMALL, "--json")


def test_search_json_contract(search_doc):
    assert {"plans", "search"} <= set(search_doc)
    assert {"sampler", "evaluations", "space_size", "elapsed_s", "rejected"} <= set(search_doc["search"])
    assert search_doc["plans"], "a small llama3-8b problem has plans that fit"
    for position, entry in enumerate(search_doc["plans"], start=1):
        assert {"rank", "plan", "estimate"} <= set(entry)
        assert entry["rank"] == position
        assert set(entry["plan"]) >= set(PLAN_KEYS) | {"dp"}
        plan = entry["plan"]
        assert plan["tp"] * plan["pp"] * plan["cp"] * plan["dp"] == 8
        assert ESTIMATE_KEYS <= set(entry["estimate"])
        assert entry["estimate"]["fits"] is True


def test_search_json_types_and_counts(search_doc):
    info = search_doc["search"]
    assert info["sampler"] == "exact"
    assert isinstance(info["evaluations"], int) and isinstance(info["space_size"], int)
    assert info["elapsed_s"] >= 0
    assert all(isinstance(v, int) and v > 0 for v in info["rejected"].values())
    if "feasible" in info:
        assert info["feasible"] + sum(info["rejected"].values()) == info["space_size"]
    values = [p["estimate"]["tokens_per_s_per_gpu"] for p in search_doc["plans"]]
    assert values == sorted(values, reverse=True)
    assert len(search_doc["plans"]) <= 10  # --top default


def test_search_top_and_fix():
    doc = ok_json("search", *SMALL, "--fix", "tp=2", "--fix", "recompute=full", "--top", "3", "--json")
    assert 1 <= len(doc["plans"]) <= 3
    assert all(p["plan"]["tp"] == 2 and p["plan"]["recompute"] == "full" for p in doc["plans"])


def test_search_same_seed_same_answer():
    args = ("search", *SMALL, "--fix", "precision=bf16", "--sampler", "tpe", "--trials", "30", "--seed", "4", "--json")
    a, b = ok_json(*args), ok_json(*args)
    assert [p["plan"] for p in a["plans"]] == [p["plan"] for p in b["plans"]]
    assert a["search"]["sampler"] == "tpe"


def test_search_pareto_json():
    doc = ok_json("search", *SMALL, "--objective", "throughput,memory", "--json")
    plans = doc["plans"]
    assert len(plans) >= 2
    for a in plans:
        for b in plans:
            ea, eb = a["estimate"], b["estimate"]
            assert not (eb["tokens_per_s_per_gpu"] >= ea["tokens_per_s_per_gpu"]
                        and eb["memory_gib_per_gpu"] <= ea["memory_gib_per_gpu"]
                        and (eb["tokens_per_s_per_gpu"] > ea["tokens_per_s_per_gpu"]
                             or eb["memory_gib_per_gpu"] < ea["memory_gib_per_gpu"]))


def test_search_with_tokens_adds_training_totals():
    doc = ok_json("search", *SMALL, "--tokens", "1e12", "--objective", "time", "--top", "2", "--json")
    est = doc["plans"][0]["estimate"]
    assert {"training_days", "gpu_hours", "cost_usd"} <= set(est)
    assert est["training_days"] == pytest.approx(1e12 / (est["tokens_per_s_per_gpu"] * 8) / 86400)


def test_search_human_output():
    result = invoke("search", *SMALL, "--top", "3")
    assert result.exit_code == 0, result.output
    assert "Best:" in result.stdout
    assert "llama3-8b" in result.stdout


# --- predict --json -----------------------------------------------------------------------------

def test_predict_gpt3_json_contract():
    doc = ok_json("predict", *GPT3, "--plan", GPT3_PLAN, "--json")
    assert ESTIMATE_KEYS <= set(doc["estimate"])
    assert doc["plan"] == {"tp": 8, "pp": 16, "cp": 1, "ep": 1, "vp": 1, "sp": True, "zero": 1, "mbs": 1,
                           "recompute": "full", "precision": "bf16", "offload": "none", "etp": 8, "schedule": "1f1b",
                           "dp": 8}
    est = doc["estimate"]
    assert est["fits"] is True
    assert 0 < est["mfu"] < 1
    assert est["step_time_s"] == pytest.approx(sum(est["time_breakdown_s"].values()), rel=1e-9)
    assert est["memory_gib_per_gpu"] == pytest.approx(sum(est["memory_breakdown_gib"].values()), rel=1e-9)
    assert est["tokens_per_s_per_gpu"] == pytest.approx(2048 * 1536 / (est["step_time_s"] * 1024), rel=1e-9)


def test_predict_fills_documented_defaults():
    plan = ok_json("predict", *SMALL, "--plan", "tp=2", "--json")["plan"]
    assert plan == {"tp": 2, "pp": 1, "cp": 1, "ep": 1, "vp": 1, "sp": True, "zero": 1, "mbs": 1,
                    "recompute": "none", "precision": "bf16", "offload": "none", "etp": 2, "schedule": "1f1b", "dp": 4}
    assert ok_json("predict", *SMALL, "--plan", "pp=2", "--json")["plan"]["sp"] is False  # sp defaults to tp > 1
    assert ok_json("predict", *SMALL, "--plan", "tp=1,recompute=full", "--json")["plan"]["dp"] == 8  # dp fills the GPUs


def test_predict_accepts_a_consistent_dp():
    assert ok_json("predict", *SMALL, "--plan", "tp=2,dp=4", "--json")["plan"]["dp"] == 4


def test_predict_marks_unrunnable_and_oom_plans():
    # A plan that breaks a validity rule gets no numbers, says why, and exits 1.
    result = invoke("predict", "-m", "llama3-8b", "-H", "a100-sxm4-80gb", "--gpus", "8", "-s", "4096", "-b", "16",
                    "--plan", "precision=fp8", "--json")
    assert result.exit_code == 1
    fp8 = json.loads(result.stdout)
    assert fp8["estimate"] is None and fp8["invalid"] == ("precision not supported by the GPU (precision=fp8, "
                                                          "a100-sxm4-80gb offers bf16, fp16)")
    text = invoke("predict", "-m", "mixtral-8x7b", "-H", "h100-sxm5-80gb", "--gpus", "16", "-s", "4096", "-b", "16",
                  "--plan", "ep=16")
    assert text.exit_code == 1 and "experts not divisible by ep" in text.stderr and "tokens/s" not in text.stdout
    # A plan that does not fit still prints its numbers, and exits 1 so that `predict ... && launch` does not launch.
    result = invoke("predict", "-m", "llama3-70b", "-H", "a100-sxm4-40gb", "--gpus", "8", "-s", "4096", "-b", "16",
                    "--plan", "zero=0", "--json")
    assert result.exit_code == 1, result.output
    oom = json.loads(result.stdout)["estimate"]
    assert oom["fits"] is False and oom["infeasible_reason"] == "out of memory"
    assert oom["step_time_s"] > 0


def test_predict_human_output():
    result = invoke("predict", *SMALL, "--plan", "tp=2,recompute=selective")
    assert result.exit_code == 0, result.output
    assert "Step time" in result.stdout and "Memory" in result.stdout


# --- --out ---------------------------------------------------------------------------------------

def test_out_writes_json_and_csv(tmp_path):
    out = tmp_path / "run"
    result = invoke("search", *SMALL, "--top", "4", "--out", str(out), "--json")
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in out.iterdir()) == ["plans.csv", "plans.json"]
    written = json.loads((out / "plans.json").read_text())
    assert written["plans"] == json.loads(result.stdout)["plans"]
    with open(out / "plans.csv", newline="") as handle:
        rows = list(csv.DictReader(handle))
    assert len(rows) == len(written["plans"]) == 4
    assert {"rank", *PLAN_KEYS, "dp", "step_time_s", "tokens_per_s_per_gpu", "memory_gib_per_gpu"} <= set(rows[0])
    assert [int(r["rank"]) for r in rows] == [1, 2, 3, 4]
    assert float(rows[0]["tokens_per_s_per_gpu"]) == pytest.approx(written["plans"][0]["estimate"]["tokens_per_s_per_gpu"])


def test_out_refuses_a_non_empty_folder_without_force(tmp_path):
    out = tmp_path / "run"
    out.mkdir()
    keep = out / "plans.json"
    keep.write_text("my precious results\n")
    result = invoke("search", *SMALL, "--out", str(out))
    assert result.exit_code == 2
    assert str(out) in result.stderr and "--force" in result.stderr
    assert "Traceback" not in result.output
    assert keep.read_text() == "my precious results\n"
    assert sorted(p.name for p in out.iterdir()) == ["plans.json"]
    # --force overwrites the plans files.
    forced = invoke("search", *SMALL, "--out", str(out), "--force")
    assert forced.exit_code == 0, forced.output
    assert "plans" in json.loads(keep.read_text())
    assert (out / "plans.csv").exists()


def test_out_refuses_a_file(tmp_path):
    target = tmp_path / "afile"
    target.write_text("x")
    result = invoke("search", *SMALL, "--out", str(target))
    assert result.exit_code == 2
    assert target.read_text() == "x"


def test_out_into_an_empty_existing_folder(tmp_path):
    result = invoke("search", *SMALL, "--out", str(tmp_path), "--top", "1")
    assert result.exit_code == 0, result.output
    assert (tmp_path / "plans.json").exists() and (tmp_path / "plans.csv").exists()


# --- hardware and models -----------------------------------------------------------------------

def test_hardware_list():
    result = invoke("hardware", "list")
    assert result.exit_code == 0, result.output
    for name in hardware_names():
        assert name in result.stdout
    assert "a100-sxm4-80gb" in result.stdout and "h100-sxm5-80gb" in result.stdout


def test_hardware_show():
    result = invoke("hardware", "show", "h100-sxm5-80gb")
    assert result.exit_code == 0, result.output
    for text in ("peak_tflops", "memory_gib", "efficiency.gemm", "gpus_per_node"):
        assert text in result.stdout


def test_models_list():
    result = invoke("models", "list")
    assert result.exit_code == 0, result.output
    for name in model_names():
        assert name in result.stdout


def test_models_show_bundled():
    result = invoke("models", "show", "llama3-70b")
    assert result.exit_code == 0, result.output
    assert "n_layers" in result.stdout and "80" in result.stdout and "8192" in result.stdout


def test_models_show_hf_config():
    result = invoke("models", "show", str(HF_QWEN3))
    assert result.exit_code == 0, result.output
    out = result.stdout
    for text in ("n_layers", "36", "head_dim", "128", "151936", "12288", "swiglu"):
        assert text in out
    # 8.19B parameters (HF reports 8,190,735,360 including the 9,216 q/k-norm weights we leave out).
    assert "8,190,726,144" in out


@pytest.mark.parametrize("group", ["hardware", "models"])
def test_show_unknown_names_exit_2(group):
    result = invoke(group, "show", "no-such-thing")
    assert result.exit_code == 2
    assert "no-such-thing" in result.stderr and "Traceback" not in result.output


# --- help ----------------------------------------------------------------------------------------

def leaf_commands() -> list[tuple[str, ...]]:
    root = typer.main.get_command(app)
    found = []

    def walk(cmd, path: tuple[str, ...]) -> None:
        # typer vendors its own click, so test for a group by its sub-commands.
        if isinstance(getattr(cmd, "commands", None), dict):
            for name, sub in cmd.commands.items():
                walk(sub, path + (name,))
        else:
            found.append(path)

    walk(root, ())
    return found


@pytest.mark.parametrize("command", [
    ("search",), ("predict",), ("hardware", "show"), ("models", "show"),
    ("hardware", "list"), ("models", "list"),
])
def test_help_shows_an_example(command):
    result = invoke(*command, "--help")
    assert result.exit_code == 0
    assert "Example" in result.stdout
    assert "autotune " + " ".join(command) in result.stdout


def test_every_other_command_help_shows_an_example():
    # Covers commands added later (validate, calibrate, ...) too.
    known_bugs = {("hardware", "list"), ("models", "list")}
    commands = leaf_commands()
    assert {("search",), ("predict",), ("hardware", "show"), ("models", "show")} <= set(commands)
    for command in commands:
        if command in known_bugs:
            continue
        result = invoke(*command, "--help")
        assert result.exit_code == 0
        assert "Example" in result.stdout, command


def help_text(*command: str) -> str:
    """--help output with the box drawing and line wrapping folded away."""
    out = invoke(*command, "--help").stdout
    return " ".join(out.replace("│", " ").split())


def test_predict_help_lists_plan_defaults():
    out = help_text("predict")
    for text in ("tp=1", "zero=1", "mbs=1", "recompute=none", "precision=bf16", "offload=none", "sp=true when tp > 1",
                 "dp is derived"):
        assert text in out


def test_predict_help_shows_the_dp_formula():
    # Written tp·pp·cp: markdown would turn tp*pp*cp into emphasis.
    assert "tp·pp·cp" in help_text("predict")


# --- bad input: exit 2, one line naming the field, no traceback ------------------------------

def assert_user_error(result, *needles: str) -> None:
    assert result.exit_code == 2, (result.exit_code, result.output)
    assert isinstance(result.exception, SystemExit)
    assert "Traceback" not in result.output
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error:")
    for needle in needles:
        assert needle in lines[0], (needle, lines[0])
    assert result.stdout == ""


@pytest.fixture(scope="module")
def bad_files(tmp_path_factory) -> dict[str, str]:
    folder = tmp_path_factory.mktemp("bad")
    malformed = folder / "broken-model.yaml"
    malformed.write_text("name: broken\nn_layers: [32\nhidden_size: 4096\n")
    unknown_key = folder / "typo-model.yaml"
    unknown_key.write_text((Path(__file__).resolve().parent.parent / "profiles" / "models" / "llama3-8b.yaml")
                           .read_text() + "n_layer: 32\n")
    space = folder / "space.yaml"
    space.write_text("name: s\naxes: {tp: [1], pp: [1], vp: [1], cp: [1], ep: [1], sp: [false], zero: [1], "
                     "mbs: [1], recompute: [none], precision: [bf16], offload: [none], tpp: [2]}\n")
    return {"malformed": str(malformed), "unknown_key": str(unknown_key), "space": str(space)}


def with_model(model: str, *rest: str) -> list[str]:
    return ["-m", model, "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16", *rest]


@pytest.mark.parametrize("args, needles", [
    (["predict", *with_model("no-such-model"), "--plan", "tp=1"], ["--model", "no-such-model"]),
    (["search", *with_model("no-such-model")], ["--model", "no-such-model"]),
    (["predict", "-m", "llama3-8b", "-H", "no-such-gpu", "--gpus", "8", "-s", "4096", "-b", "16", "--plan", "tp=1"],
     ["--hardware", "no-such-gpu"]),
    (["predict", *SMALL, "--plan", "tq=2"], ["--plan", "tq"]),
    (["predict", *SMALL, "--plan", "tp=3"], ["--plan", "tp=3"]),
    (["predict", *SMALL, "--plan", "tp=2,dp=8"], ["--plan", "dp"]),
    (["predict", *SMALL, "--plan", "recompute=some"], ["--plan", "recompute"]),
    (["predict", *SMALL, "--plan", "tp"], ["--plan"]),
    (["predict", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "12", "-s", "4096", "-b", "16", "--plan", "tp=1"],
     ["--gpus", "12"]),
    (["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "12", "-s", "4096", "-b", "16"], ["--gpus"]),
    (["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "-s", "4096", "-b", "16"], ["--gpus"]),
    (["search", *SMALL, "--objective", "time"], ["--objective time", "--tokens"]),
    (["search", *SMALL, "--objective", "speed"], ["speed"]),
    (["search", *SMALL, "--fix", "tq=2"], ["--fix", "tq"]),
    (["search", *SMALL, "--fix", "dp=2"], ["--fix", "dp"]),
    (["search", *SMALL, "--sampler", "annealing"], ["sampler", "annealing"]),
    (["search", *SMALL, "--trials", "0"], ["--trials"]),
    (["search", *SMALL, "--top", "0"], ["--top"]),
    (["predict", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "0", "-b", "16", "--plan", "tp=1"],
     ["--seq-len"]),
    (["search", *SMALL, "--tokens", "-5"], ["--tokens"]),
    (["search", *SMALL, "--price", "-1"], ["--price"]),
])
def test_bad_input_exits_2_with_one_line(args, needles):
    assert_user_error(runner.invoke(app, args), *needles)


@pytest.mark.parametrize("which, command, needles", [
    ("malformed", "predict", ["broken-model.yaml", "malformed YAML"]),
    ("malformed", "search", ["broken-model.yaml", "malformed YAML"]),
    ("unknown_key", "predict", ["typo-model.yaml", "n_layer"]),
])
def test_bad_model_files(bad_files, which, command, needles):
    extra = ["--plan", "tp=1"] if command == "predict" else []
    assert_user_error(invoke(command, *with_model(bad_files[which]), *extra), *needles)


def test_bad_space_file(bad_files):
    assert_user_error(invoke("search", *SMALL, "--space", bad_files["space"]), "space.yaml", "axes.tpp")


def test_missing_space_file(tmp_path):
    assert_user_error(invoke("search", *SMALL, "--space", str(tmp_path / "none.yaml")), "none.yaml")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_gp_without_torch():
    assert_user_error(invoke("search", *SMALL, "--sampler", "gp", "--trials", "5"), "--sampler gp", "PyTorch")


@pytest.mark.skipif(importlib.util.find_spec("torch") is not None, reason="torch is installed")
def test_gp_error_keeps_the_extra_name():
    result = invoke("search", *SMALL, "--sampler", "gp", "--trials", "5")
    assert "autotune[gp]" in result.stderr


@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("fix", ["tp=0", "pp=0", "mbs=0", "zero=7"])
def test_out_of_range_fix_is_a_user_error(fix):
    assert_user_error(invoke("search", *SMALL, "--fix", fix), "--fix")


# --- nothing fits ---------------------------------------------------------------------------------

def test_nothing_fits_exits_1_and_says_what_binds():
    result = invoke("search", "-m", "llama3-405b", "-H", "a100-sxm4-40gb", "--gpus", "8", "-s", "4096", "-b", "8",
                    "--fix", "zero=0")
    assert result.exit_code == 1, result.output
    assert "Traceback" not in result.output
    assert "no plan fits" in result.stderr
    assert "What binds" in result.stderr and "memory" in result.stderr
    fixes = [line for line in result.stderr.splitlines() if line.strip().startswith("- ")]
    assert len(fixes) >= 1
    assert any("--gpus" in line or "--fix" in line or "--seq-len" in line for line in fixes)


def test_nothing_fits_json_is_still_valid():
    result = invoke("search", "-m", "llama3-405b", "-H", "a100-sxm4-40gb", "--gpus", "8", "-s", "4096", "-b", "8",
                    "--fix", "zero=0", "--json")
    assert result.exit_code == 1
    doc = json.loads(result.stdout)
    assert doc["plans"] == []
    assert doc["search"]["rejected"].get("out of memory", 0) > 0
