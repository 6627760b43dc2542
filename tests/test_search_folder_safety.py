"""A search written over an earlier search's folder (`search --out DIR --force`) removes only the launch files that
search wrote: nothing reached through a symbolic link, nothing outside DIR.  Each case runs the CLI through
typer's CliRunner, as a user would."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
SMALL = ["--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8", "--seq-len", "4096",
         "--global-batch", "64"]
SERVE_SMALL = ["--workload", "serve", "--model", "llama3-8b", "--hardware", "h100-sxm5-80gb", "--gpus", "8",
               "--input-len", "1024", "--output-len", "128"]


def _record(out: Path, launch_files) -> None:
    """Replace the launch-file record of ``out``'s plans.json (an older release's list, or a hand edit)."""
    doc = json.loads((out / "plans.json").read_text(encoding="utf-8"))
    doc["launch_files"] = launch_files
    (out / "plans.json").write_text(json.dumps(doc), encoding="utf-8")


def test_a_forced_search_removes_nothing_through_a_symlinked_subfolder(tmp_path):
    """A recorded launch file under a subfolder of --out that is a symbolic link to a folder elsewhere resolves
    outside --out: it is left alone, the link too, and the search ends without a traceback with a whole
    plans.json."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "serve_vllm.sh").write_text("echo mine", encoding="utf-8")
    out = tmp_path / "run"
    first = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--emit", "vllm"])
    assert first.exit_code == 0, first.output
    (out / "vllm").symlink_to(elsewhere, target_is_directory=True)
    _record(out, ["serve_vllm.sh", "vllm/serve_vllm.sh"])  # an older release's record, naming a subfolder
    second = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert second.exit_code == 0, second.output
    assert second.exception is None and "Traceback" not in second.output
    assert (elsewhere / "serve_vllm.sh").read_text(encoding="utf-8") == "echo mine"
    assert (out / "vllm").is_symlink()
    assert not (out / "serve_vllm.sh").exists()  # the search's own file, inside --out, is removed
    doc = json.loads((out / "plans.json").read_text(encoding="utf-8"))
    assert doc["inputs"]["workload"] == "train" and not doc["launch_files"]


def test_a_forced_search_removes_nothing_a_nested_symlink_reaches(tmp_path):
    """A link further down (run/sub/deeper -> elsewhere) is a symlink component too, whatever its target."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "launch.sh").write_text("echo mine", encoding="utf-8")
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out)]).exit_code == 0
    (out / "sub").mkdir()
    (out / "sub" / "deeper").symlink_to(elsewhere, target_is_directory=True)
    _record(out, ["sub/deeper/launch.sh"])
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert (elsewhere / "launch.sh").read_text(encoding="utf-8") == "echo mine"


def test_a_forced_search_removes_the_recorded_subfolders_it_empties_and_keeps_one_that_holds_more(tmp_path):
    """Every folder between --out and a removed launch file that is left empty goes too; one holding a file of
    the user's stays."""
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out)]).exit_code == 0
    for sub in ("a/deeper", "b"):
        (out / sub).mkdir(parents=True)
        (out / sub / "launch.sh").write_text("echo", encoding="utf-8")
    (out / "b" / "notes.txt").write_text("mine", encoding="utf-8")
    _record(out, ["a/deeper/launch.sh", "b/launch.sh"])
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert not (out / "a").exists()
    assert not (out / "b" / "launch.sh").exists() and (out / "b" / "notes.txt").read_text(encoding="utf-8") == "mine"
