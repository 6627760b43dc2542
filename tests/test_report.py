"""autotune report: the HTML file (self-contained, offline) and the PNG figures, checked as a person sees them."""

from __future__ import annotations

import json
import re

import pytest
from typer.testing import CliRunner

from autotune.cli import app
from autotune.outputs.report.data import best_so_far
from autotune.outputs.report.figures import pareto_front

matplotlib = pytest.importorskip("matplotlib", reason="autotune report needs matplotlib: pip install '.[report]'")
runner = CliRunner()
SMALL = ["-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus", "8", "-s", "4096", "-b", "16"]
FIGURES = {"throughput_memory", "throughput_cost", "step_breakdown", "memory_breakdown", "convergence", "importance"}


@pytest.fixture(scope="module")
def report_dir(tmp_path_factory):
    base = tmp_path_factory.mktemp("report")
    result = runner.invoke(app, ["search", *SMALL, "--out", str(base / "run")])
    assert result.exit_code == 0, result.output
    made = runner.invoke(app, ["report", str(base / "run" / "plans.json"), "--out", str(base / "rep"), "--trials", "40"])
    assert made.exit_code == 0, made.output
    return base / "rep"


def check_png(path, min_bytes=5_000):
    """A real figure: big enough, decodes, and not blank (many non-white pixels, more than two colours)."""
    import numpy as np
    from matplotlib import image

    assert path.stat().st_size >= min_bytes, path
    pixels = image.imread(path)
    assert pixels.ndim == 3 and pixels.shape[0] >= 200 and pixels.shape[1] >= 300, pixels.shape
    rgb = pixels[..., :3]
    ink = np.any(rgb < 0.95, axis=-1).mean()
    assert ink > 0.02, f"{path.name} is nearly blank ({ink:.1%} ink)"
    assert len(np.unique((rgb * 255).astype(int).reshape(-1, 3)[::7], axis=0)) > 8, f"{path.name} has too few colours"


def test_report_writes_every_png(report_dir):
    assert {p.stem for p in report_dir.glob("*.png")} == FIGURES
    for path in report_dir.glob("*.png"):
        check_png(path)


def test_report_html_is_self_contained(report_dir):
    html = (report_dir / "report.html").read_text()
    assert html.startswith("<!DOCTYPE html>")
    assert html.count("data:image/png;base64,") == len(FIGURES)
    # Works offline: nothing is fetched from anywhere.
    assert not re.search(r"(src|href)=[\"']?(https?:)?//", html)
    assert "<link" not in html
    for name in FIGURES:
        assert f"id={name}" in html


def test_report_errors(tmp_path):
    missing = runner.invoke(app, ["report", str(tmp_path / "nope.json"), "--out", str(tmp_path / "o")])
    assert missing.exit_code == 2 and "no such file" in missing.output
    bad = tmp_path / "bad.json"
    bad.write_text(json.dumps({"hello": 1}))
    wrong = runner.invoke(app, ["report", str(bad), "--out", str(tmp_path / "o")])
    assert wrong.exit_code == 2 and "plans" in wrong.output
    study = runner.invoke(app, ["report", "--storage", "sqlite:///x.db", "--study", "s"])
    assert study.exit_code == 2 and "--storage" in study.output


def test_report_names_the_extra_when_matplotlib_is_missing(monkeypatch, tmp_path):
    import builtins

    real_import = builtins.__import__

    def no_matplotlib(name, *args, **kwargs):
        if name == "matplotlib" or name.startswith("matplotlib."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_matplotlib)
    plans = tmp_path / "plans.json"
    plans.write_text("{}")
    result = runner.invoke(app, ["report", str(plans), "--out", str(tmp_path / "o")])
    assert result.exit_code == 2 and "autotune[report]" in result.output


def test_capacity_report_plots_time_against_cost(tmp_path):
    run = tmp_path / "cap"
    result = runner.invoke(app, ["search", "-m", "llama3-8b", "-H", "h100-sxm5-80gb,a100-sxm4-80gb", "--gpus", "8..32",
                                 "-s", "4096", "-b", "64", "--tokens", "1e11", "--deadline", "30d", "--out", str(run)])
    assert result.exit_code == 0, result.output
    made = runner.invoke(app, ["report", str(run / "plans.json"), "--out", str(tmp_path / "rep"), "--trials", "0"])
    assert made.exit_code == 0, made.output
    html = (tmp_path / "rep" / "report.html").read_text()
    assert "Capacity plan" in html and "Time against cost" in html
    check_png(tmp_path / "rep" / "throughput_cost.png")
    assert not (tmp_path / "rep" / "convergence.png").exists()  # --trials 0 skips the convergence runs


def test_pareto_front_and_best_so_far():
    import numpy as np

    x = np.array([1.0, 2.0, 3.0, 2.5])
    y = np.array([1.0, 3.0, 2.0, 3.5])
    # Minimise x, maximise y: (1,1), (2,3), (2.5,3.5) are non-dominated; (3,2) is dominated.
    assert list(pareto_front(x, y, maximize_x=False, maximize_y=True)) == [0, 1, 3]
    curve = best_so_far([None, 2.0, 1.0, None, 3.0], "maximize")
    assert np.isnan(curve[0]) and curve[1:] == [2.0, 2.0, 2.0, 3.0]


def test_a_report_written_over_another_removes_the_figures_it_does_not_draw(tmp_path):
    """report --out DIR --force over an earlier report: the earlier figures this one does not draw go (their
    names are recorded in report.html), a user's own PNG stays, and the note names what went."""
    train, serve = tmp_path / "train", tmp_path / "serve"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(train)]).exit_code == 0
    assert runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                               "8", "--input-len", "1024", "--output-len", "128", "--out", str(serve)]).exit_code == 0
    rep = tmp_path / "rep"
    first = runner.invoke(app, ["report", str(train), "--out", str(rep), "--trials", "0"])
    assert first.exit_code == 0, first.output
    assert (rep / "step_breakdown.png").exists()
    (rep / "mine.png").write_bytes(b"not autotune's")
    second = runner.invoke(app, ["report", str(serve), "--out", str(rep), "--force"])
    assert second.exit_code == 0, second.output
    pngs = {p.name for p in rep.glob("*.png")}
    drawn = {e.rpartition(":")[0] for e in
             re.search(r'autotune-figures content="([^"]*)"', (rep / "report.html").read_text()).group(1).split()}
    assert pngs == drawn | {"mine.png"} and "step_breakdown.png" not in pngs, pngs
    assert "removed the earlier report's figures" in " ".join(second.stderr.split())


def test_a_report_written_over_another_keeps_a_figure_edited_since(tmp_path):
    """report --force removes an earlier report's figure only while its bytes are the ones that report wrote
    (sha256 in report.html): an edited one, or one a report.html without checksums names, stays, and is named."""
    train, serve = tmp_path / "train", tmp_path / "serve"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(train)]).exit_code == 0
    assert runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb", "--gpus",
                               "8", "--input-len", "1024", "--output-len", "128", "--out", str(serve)]).exit_code == 0
    rep = tmp_path / "rep"
    assert runner.invoke(app, ["report", str(train), "--out", str(rep), "--trials", "0"]).exit_code == 0
    meta = re.search(r'autotune-figures content="([^"]*)"', (rep / "report.html").read_text()).group(1).split()
    assert meta and all(len(e.rpartition(":")[2]) == 64 for e in meta), meta
    (rep / "step_breakdown.png").write_bytes(b"annotated by hand")
    second = runner.invoke(app, ["report", str(serve), "--out", str(rep), "--force"])
    assert second.exit_code == 0, second.output
    assert (rep / "step_breakdown.png").read_bytes() == b"annotated by hand"
    said = " ".join(second.stderr.split())
    assert "kept the earlier report's step_breakdown.png (edited since" in said, said
    # a report.html that names its figures without checksums (an earlier autotune): nothing it names is removed
    (rep / "report.html").write_text('<meta charset=utf-8><meta name=autotune-figures content="old.png">')
    (rep / "old.png").write_bytes(b"png")
    third = runner.invoke(app, ["report", str(train), "--out", str(rep), "--trials", "0", "--force"])
    assert third.exit_code == 0, third.output
    assert (rep / "old.png").exists() and "kept the earlier report's old.png" in " ".join(third.stderr.split())


def test_a_calibrated_search_names_its_overlay_in_search_plans_json_and_report(tmp_path):
    """The numbers of a search given --calibration come from that fit: search's header, plans.json and the report
    name the overlay (the report read the calibrated profile embedded in plans.json but never said so), and a
    serving search's parameters note names it too."""
    overlay = tmp_path / "h100-fit.yaml"
    overlay.write_text("hardware:\n  h100-sxm5-80gb:\n    efficiency:\n      gemm: 0.62\n", encoding="utf-8")
    searched = runner.invoke(app, ["search", *SMALL, "--calibration", str(overlay), "--out", str(tmp_path / "run")])
    assert searched.exit_code == 0, searched.output
    assert "h100-sxm5-80gb efficiencies from the calibration overlay h100-fit.yaml" in searched.output
    doc = json.loads((tmp_path / "run" / "plans.json").read_text(encoding="utf-8"))
    assert doc["inputs"]["calibration"] == "h100-fit.yaml"  # the name, not the user's path
    assert doc["inputs"]["hardware_profile"]["efficiency"]["gemm"] == 0.62
    made = runner.invoke(app, ["report", str(tmp_path / "run" / "plans.json"), "--out", str(tmp_path / "rep"),
                               "--trials", "0"])
    assert made.exit_code == 0, made.output
    html = (tmp_path / "rep" / "report.html").read_text(encoding="utf-8")
    assert "efficiencies from the calibration overlay h100-fit.yaml" in html
    # an uncalibrated search records none, and its report says nothing of one
    plain = runner.invoke(app, ["search", *SMALL, "--json"])
    assert plain.exit_code == 0 and "calibration" not in json.loads(plain.stdout)["inputs"], plain.output
    served = runner.invoke(app, ["search", "--workload", "serve", "-m", "llama3-8b", "-H", "h100-sxm5-80gb",
                                 "--gpus", "1", "--input-len", "1000", "--output-len", "100", "--engine", "vllm",
                                 "--calibration", str(_serving_overlay(tmp_path)), "--json"])
    assert served.exit_code == 0, served.output
    assert json.loads(served.stdout)["inputs"]["parameters"] == (
        "serving parameters from the --calibration overlay serving-fit.yaml")


def _serving_overlay(tmp_path):
    """A serving overlay holding the shipped vLLM parameters (the serving schema `autotune calibrate` writes)."""
    from autotune.serving.calibrated import CURRENT

    path = tmp_path / "serving-fit.yaml"
    values = "".join(f"    {k}: {v}\n" for k, v in CURRENT["vllm"].as_dict().items())
    path.write_text(f"schema: serving\nengines:\n  vllm:\n{values}", encoding="utf-8")
    return path
