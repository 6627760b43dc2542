"""autotune report --storage URL --study NAME: the report of a stored study (search or measured `tune`)."""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

import pytest
from typer.testing import CliRunner

from autotune.cli import app

matplotlib = pytest.importorskip("matplotlib", reason="autotune report needs matplotlib: pip install '.[report]'")
runner = CliRunner()
HERE = Path(__file__).parent
BENCH = HERE / "bench_scripts" / "fake_bench.py"
SMALL_SPACE = HERE / "bench_scripts" / "space_small.yaml"
SEARCH = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
STUDY_FIGURES = {"throughput_memory", "throughput_cost", "step_breakdown", "memory_breakdown", "convergence",
                 "importance"}


@pytest.fixture(scope="module")
def base(tmp_path_factory):
    """A scratch folder, in memory where there is one: SQLite commits to disk are slow on some CI machines."""
    shm = Path("/dev/shm")
    if shm.is_dir() and os.access(shm, os.W_OK):
        path = Path(tempfile.mkdtemp(prefix="autotune-report-", dir=shm))
        yield path
        shutil.rmtree(path, ignore_errors=True)
    else:
        yield tmp_path_factory.mktemp("report-study")


def search_study(url: str, trials: int, *extra: str) -> None:
    made = runner.invoke(app, ["search", *SEARCH, "--storage", url, "--study", "s", "--sampler", "tpe", "--trials",
                               str(trials), "--heartbeat", "0", "--json", *extra])
    assert made.exit_code == 0, made.output


def report(*args: str):
    return runner.invoke(app, ["report", *args])


def check_png(path: Path, min_bytes: int = 5_000) -> None:
    """A real figure: big enough, decodes, and not blank (as tests/test_report.py checks them)."""
    import numpy as np
    from matplotlib import image

    assert path.stat().st_size >= min_bytes, path
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] >= 200 and pixels.shape[1] >= 300, pixels.shape
    rgb = pixels[..., :3]
    assert np.any(rgb < 0.95, axis=-1).mean() > 0.02, f"{path.name} is nearly blank"
    assert len(np.unique((rgb * 255).astype(int).reshape(-1, 3)[::7], axis=0)) > 8, f"{path.name} has too few colours"


@pytest.fixture(scope="module")
def sqlite_report(base):
    url = f"sqlite:///{base}/s.db"
    search_study(url, 30)
    made = report("--storage", url, "--study", "s", "--out", str(base / "rep"), "--trials", "30")
    assert made.exit_code == 0, made.output
    return base / "rep", url


def test_sqlite_study_report_writes_html_and_pngs(sqlite_report):
    out, _ = sqlite_report
    assert {p.stem for p in out.glob("*.png")} == STUDY_FIGURES
    for path in out.glob("*.png"):
        check_png(path)
    html = (out / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>") and html.count("data:image/png;base64,") == len(STUDY_FIGURES)
    assert "study s" in html and "Top plans" in html
    # The convergence figure is the study's own trials against random search at the same budget.
    assert "among the trials of study &#x27;s&#x27;" in html and "random search at the same budget of 30" in html
    assert "distinct plans tried in study" in html  # importance from the study's trials


def test_study_report_ranks_the_studys_own_plans(sqlite_report):
    from autotune.outputs.report.data import StudySource, gather
    from autotune.search.optuna_study import load_records

    _, url = sqlite_report
    data = gather(StudySource(url, "s"), trials=0)
    assert data.history is not None and list(data.history.curves) == ["study s (TPE)"]  # --trials 0: no random run
    assert len(data.history.curves["study s (TPE)"]) == 30
    tried = {r["user_attrs"]["plan_key"] for r in load_records(url, "s")}
    keys = [",".join(f"{k}={str(v).lower() if isinstance(v, bool) else v}" for k, v in p["plan"].items() if k != "dp")
            for p in data.plans]
    assert data.plans and set(keys) <= tried
    values = [p["estimate"]["tokens_per_s_per_gpu"] for p in data.plans]
    assert values == sorted(values, reverse=True)
    assert data.inputs["model"] == "llama3-8b" and data.inputs["gpus"] == 8


def test_journal_study_report(base):
    url = f"journal:{base}/s.log"
    search_study(url, 20)
    made = report("--storage", url, "--study", "s", "--out", str(base / "jrep"), "--trials", "0")
    assert made.exit_code == 0, made.output
    html = (base / "jrep" / "report.html").read_text()
    assert "study s" in html and "id=convergence" in html
    check_png(base / "jrep" / "convergence.png")


def _bench_table(path: Path) -> Path:
    """Every plan of the small space measures 88% of its prediction; plans that do not fit run out of memory."""
    from autotune.inputs.hardware import Cluster, load_hardware
    from autotune.inputs.modelspec import load_model
    from autotune.inputs.workload import TrainWorkload
    from autotune.search.exact import exact_search
    from autotune.training.problem import TrainingProblem
    from autotune.training.space import load_space

    hw = load_hardware("h100-sxm5-80gb")
    problem = TrainingProblem.build(load_model("llama3-8b"), Cluster(hw, 8, 8), TrainWorkload(4096, 16),
                                    load_space(str(SMALL_SPACE)))
    table = {}
    for batch, est in exact_search(problem).estimates:
        for i in range(len(batch)):
            fits = est.memory_gib_per_gpu[i] <= hw.memory_gib
            table[batch.plan(i).as_string()] = ({"tokens": round(float(est.tokens_per_s_per_gpu[i]) * 0.88, 1),
                                                 "memory": float(est.memory_gib_per_gpu[i])} if fits else {"oom": True})
    path.write_text(json.dumps(table))
    return path


def test_tune_study_report_shows_measured_against_predicted(base):
    url = f"sqlite:///{base}/t.db"
    table = _bench_table(base / "table.json")
    made = runner.invoke(app, ["tune", *SEARCH, "--space", str(SMALL_SPACE), "--storage", url, "--study", "t",
                               "--trials", "8", "--run", f"{sys.executable} {BENCH}", "--heartbeat", "0", "--json"],
                         env={"FAKE_BENCH_TABLE": str(table)})
    assert made.exit_code == 0, made.output
    out = base / "trep"
    made = report("--storage", url, "--study", "t", "--out", str(out))
    assert made.exit_code == 0, made.output
    assert (out / "measured_predicted.png").exists()
    check_png(out / "measured_predicted.png")
    html = (out / "report.html").read_text()
    assert "Measured trials" in html and "Best measured plan" in html and "id=measured_predicted" in html
    assert "-12.0%" not in html and "+13.6%" in html  # error = predicted / measured - 1 = 1 / 0.88 - 1
    # the summary counts the runs and the distinct plans they completed as such ("4 plans evaluated" beside
    # "6 benchmark runs" read as a miscount)
    import re
    summary = re.search(r"(\d+) benchmark runs \((\d+) succeeded\), completing (\d+) distinct plans? of a space", html)
    assert summary and int(summary[1]) == 8 and int(summary[2]) <= 8 and 1 <= int(summary[3]) <= 8, html[:3000]

    from autotune.outputs.report.data import StudySource, gather

    data = gather(StudySource(url, "t"), trials=0)
    measured = [p["measured_tokens_per_s_per_gpu"] for p in data.plans]
    assert measured == sorted(measured, reverse=True)  # ranked by measurement
    assert list(data.history.curves) == ["study t (cost-model prior, then TPE)"] and data.history.budget == 8
    assert data.history.optimum is None  # no random search or exact line for real runs


def test_study_report_errors(base, sqlite_report):
    _, url = sqlite_report
    unknown = report("--storage", url, "--study", "nope", "--out", str(base / "o1"))
    assert unknown.exit_code == 2, unknown.output
    assert "no study 'nope'" in unknown.output and "--study" in unknown.output and "'s'" in unknown.output
    assert "Traceback" not in unknown.output and not (base / "o1").exists()
    missing = report("--storage", f"sqlite:///{base}/typo.db", "--study", "s", "--out", str(base / "o2"))
    assert missing.exit_code == 2 and "--storage" in missing.output and "no such file" in missing.output
    assert not (base / "typo.db").exists()  # not created by looking
    journal = report("--storage", f"journal:{base}/typo.log", "--study", "s", "--out", str(base / "o2"))
    assert journal.exit_code == 2 and "no such file" in journal.output and not (base / "typo.log").exists()
    bad = report("--storage", "redis://x", "--study", "s", "--out", str(base / "o2"))
    assert bad.exit_code == 2 and "--storage" in bad.output
    half = report("--storage", url, "--out", str(base / "o2"))
    assert half.exit_code == 2 and "--study" in half.output
    other = report("--study", "s", "--out", str(base / "o2"))
    assert other.exit_code == 2 and "--storage" in other.output
    both = report(str(base / "plans.json"), "--storage", url, "--study", "s", "--out", str(base / "o2"))
    assert both.exit_code == 2 and "not both" in both.output


def test_a_study_not_made_by_autotune(base):
    import optuna

    url = f"sqlite:///{base}/foreign.db"
    optuna.create_study(study_name="plain", storage=url)
    made = report("--storage", url, "--study", "plain", "--out", str(base / "o3"))
    assert made.exit_code == 2 and "not made by autotune" in made.output and "--study" in made.output
