"""A search written over an earlier search's folder (`search --out DIR --force`) removes only the launch files that
search wrote and nobody touched since: nothing reached through a symbolic link, nothing outside DIR, no script
the user edited.  Notes about the model a search or explain names say only what is true.  Each case runs the
CLI through typer's CliRunner, as a user would."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app

runner = CliRunner()
ROOT = Path(__file__).resolve().parent.parent
LLAMA3_8B_CONFIG = ROOT / "tests" / "data" / "hf_configs" / "Meta-Llama-3-8B" / "config.json"
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
    # an older release's record holds no hash: whether the file was edited cannot be told, so it is kept and said
    assert (out / "serve_vllm.sh").exists() and "cannot tell whether it was edited" in second.output.replace("\n", " ")
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
    echo = hashlib.sha256(b"echo").hexdigest()  # the record of a search that wrote them (unedited since)
    _record(out, {"a/deeper/launch.sh": echo, "b/launch.sh": echo})
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert not (out / "a").exists()
    assert not (out / "b" / "launch.sh").exists() and (out / "b" / "notes.txt").read_text(encoding="utf-8") == "mine"


def test_plans_json_records_each_launch_file_with_its_sha256_and_reads_back(tmp_path):
    """The record maps each launch file to the sha256 of what the search wrote; report, emit and explain read
    such a folder back."""
    out = tmp_path / "run"
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--emit", "deepspeed"])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "plans.json").read_text(encoding="utf-8"))["launch_files"]
    assert record == {name: hashlib.sha256((out / name).read_bytes()).hexdigest()
                      for name in ("deepspeed_launch.sh", "ds_config.json")}
    assert runner.invoke(app, ["explain", str(out)]).exit_code == 0
    emitted = runner.invoke(app, ["emit", str(out), "--format", "deepspeed"])
    assert emitted.exit_code == 0, emitted.output
    report = runner.invoke(app, ["report", str(out), "--out", str(tmp_path / "report"), "--trials", "0"])
    assert report.exit_code == 0, report.output


def test_a_forced_search_keeps_a_launch_file_the_user_edited_and_says_so(tmp_path):
    """A recorded launch file whose content no longer matches its recorded sha256 was edited after the search
    wrote it: a later --force search keeps it and names it; the unedited one is removed."""
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out), "--emit", "deepspeed"]).exit_code == 0
    script = out / "deepspeed_launch.sh"
    edited = script.read_text(encoding="utf-8") + "# my cluster's module loads\n"
    script.write_text(edited, encoding="utf-8")
    second = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--force", "--emit", "vllm"])
    assert second.exit_code == 0, second.output
    assert script.read_text(encoding="utf-8") == edited
    assert not (out / "ds_config.json").exists() and (out / "serve_vllm.sh").exists()
    text = " ".join(second.stderr.split())
    assert f"kept {script}: edited since the search wrote it" in text, text
    assert "ds_config.json" in text and "removed" in text
    # the kept file is the user's now: the new record does not name it, and a third search leaves it alone
    assert set(json.loads((out / "plans.json").read_text(encoding="utf-8"))["launch_files"]) == {"serve_vllm.sh"}
    third = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--force"])
    assert third.exit_code == 0 and script.read_text(encoding="utf-8") == edited
    assert not (out / "serve_vllm.sh").exists()


def test_an_older_plans_json_records_launch_files_as_a_list_of_names(tmp_path):
    """A plans.json from before the record held hashes lists names only: whether a file was edited since cannot be
    told, so --force keeps them and says so (it had removed a hand-edited script; fuzz review)."""
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out), "--emit", "deepspeed"]).exit_code == 0
    _record(out, ["deepspeed_launch.sh", "ds_config.json"])
    (out / "deepspeed_launch.sh").write_text("echo edited before hashes were kept", encoding="utf-8")
    result = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert (out / "deepspeed_launch.sh").read_text(encoding="utf-8") == "echo edited before hashes were kept"
    assert (out / "ds_config.json").exists() and "cannot tell whether it was edited" in result.output.replace("\n", " ")


def test_a_damaged_hash_in_the_record_removes_nothing(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out), "--emit", "deepspeed"]).exit_code == 0
    _record(out, {"deepspeed_launch.sh": 3, "ds_config.json": None})
    result = runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert (out / "deepspeed_launch.sh").exists() and (out / "ds_config.json").exists()


def test_a_record_naming_a_file_too_long_for_the_file_system_stops_nothing(tmp_path):
    """is_symlink() raised ENAMETOOLONG on a 5,000-character name and the search stopped with an error naming
    neither plans.json nor launch_files."""
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out)]).exit_code == 0
    _record(out, {"x" * 5000: "0" * 64, "a\u0000b": "0" * 64})
    result = runner.invoke(app, ["search", *SMALL, "--out", str(out), "--force"])
    assert result.exit_code == 0 and "Traceback" not in result.output, result.output
    assert json.loads((out / "plans.json").read_text())["plans"]


def _config_at(tmp_path: Path) -> Path:
    """The Llama-3-8B config.json in a local folder whose name holds an '@' (as a versioned checkout's might)."""
    path = tmp_path / "models" / "llama@v2" / "config.json"
    path.parent.mkdir(parents=True)
    shutil.copy(LLAMA3_8B_CONFIG, path)
    return path


def test_a_local_config_path_with_an_at_sign_names_no_revision(tmp_path):
    """`-m ./models/llama@v2/config.json` is a file, not a Hugging Face id at revision 'v2/config.json'."""
    config = _config_at(tmp_path)
    serve = [a if a != "llama3-8b" else str(config) for a in SERVE_SMALL]
    searched = runner.invoke(app, ["search", *serve, "--out", str(tmp_path / "run"), "--emit", "vllm"])
    assert searched.exit_code == 0, searched.output
    assert "revision" not in searched.stderr, searched.stderr
    emitted = runner.invoke(app, ["emit", "tp=1", "--format", "vllm", "-m", str(config), "-H", "h100-sxm5-80gb",
                                  "--gpus", "1", "--input-len", "100", "--output-len", "10"])
    assert emitted.exit_code == 0, emitted.output
    assert "revision" not in emitted.stderr, emitted.stderr


def test_a_yaml_path_with_an_at_sign_names_no_revision_even_before_it_exists():
    from autotune.outputs.emit.formats import model_revision_note

    assert model_revision_note("specs/llama@v2/model.yaml") is None
    assert model_revision_note("org/name@abc123") is not None  # an id at a revision still says so


def test_explain_with_the_searched_models_own_config_json_says_nothing_about_another_model(tmp_path):
    """`explain PLANS -m config.json` where the config is the searched model's architecture under another name
    (meta-llama-3-8b for llama3-8b) explains the same model: no 'searched for' note; another model still gets
    one."""
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SMALL, "--out", str(out)]).exit_code == 0
    same = runner.invoke(app, ["explain", str(out), "-m", str(LLAMA3_8B_CONFIG)])
    assert same.exit_code == 0, same.output
    assert "searched for" not in same.stderr, same.stderr
    other = runner.invoke(app, ["explain", str(out), "-m", "llama3.1-8b"])
    assert other.exit_code in (0, 1), other.output
    assert "was searched for llama3-8b" in " ".join(other.stderr.split()), other.stderr


def test_explain_of_a_serving_plans_json_with_its_models_config_json_says_nothing(tmp_path):
    out = tmp_path / "run"
    assert runner.invoke(app, ["search", *SERVE_SMALL, "--out", str(out)]).exit_code == 0
    same = runner.invoke(app, ["explain", str(out), "-m", str(LLAMA3_8B_CONFIG)])
    assert same.exit_code == 0, same.output
    assert "searched for" not in same.stderr, same.stderr
