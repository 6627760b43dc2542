"""Edges a bad-input sweep (round 7) found by trying the CLI with hostile files: a YAML alias bomb hidden in a
hardware profile's sources (accepted after a minute and gigabytes of memory), an alias inside the value it names,
and cells of a serving-runs CSV that were read as a prediction without a word.

Each case runs as a person would type it, through typer's CliRunner: a user error is one line naming the file,
the field and a fix, exit status 2, no traceback."""

from __future__ import annotations

import csv
import os
from pathlib import Path
import json
import re
import time

import pytest

from tests.test_bad_input import PROFILE, ROOT, SERVE, SPEC, assert_user_error, invoke

# --- 1. YAML aliases that expand without bound ------------------------------------------------------------------

# nine levels of nine aliases each: 9**9 values from a dozen lines
ANCHORS = "".join(f"  {name}: &{name} [{', '.join([f'*{prev}'] * 9)}]\n"
                  for prev, name in zip("abcdefgh", "bcdefghi"))
BOMB = "  a: &a [x, x, x, x, x, x, x, x, x]\n" + ANCHORS


@pytest.mark.parametrize("command", [
    ["hardware", "show", "{path}"],
    ["predict", "--workload", "serve", "-m", "llama3-8b", "-H", "{path}", "--gpus", "8", "--input-len", "512",
     "--output-len", "128", "-p", "tp=1"],
], ids=["show", "predict"])
def test_an_alias_bomb_in_a_profile_is_refused_at_once(command, tmp_path):
    """The aliases sat under ``sources:`` (free text a profile may hold), so the unknown-key check did not see
    them: the profile loaded, and the run took about a minute and 2.5 GB before it printed a plan."""
    path = tmp_path / "gpu.yaml"
    path.write_text(PROFILE.replace("sources:\n", "sources:\n" + BOMB, 1))
    started = time.monotonic()
    result = invoke(*[part.format(path=path) for part in command])
    assert time.monotonic() - started < 20
    assert_user_error(result, str(path), "must expand to at most 1,000,000 values", "but got 490,329,")


def test_an_alias_inside_the_value_it_names_is_refused(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text(SPEC.replace("description: Meta Llama 3 8B (dense, GQA)", "description: &d [x, *d]", 1))
    assert_user_error(invoke("models", "show", path), str(path), "inside the value its anchor", "line 2")


def test_aliases_that_expand_modestly_still_load(tmp_path):
    """An anchor reused a few times (or a merge key) is ordinary YAML, and stays allowed."""
    path = tmp_path / "gpu.yaml"
    path.write_text(PROFILE.replace("sources:\n", "sources:\n  shared: &s [x, x]\n  again: *s\n  more: *s\n", 1))
    result = invoke("hardware", "show", path)
    assert result.exit_code == 0, result.output


# --- 2. serving-runs cells that were predicted without a word ---------------------------------------------------

RUNS_HEADER = ("id,source_group,model_name,n_layers,hidden_size,ffn_hidden_size,n_heads,n_kv_heads,vocab_size,gpu,"
               "n_gpus,tp,pp,weight_precision,kv_cache_dtype,input_len,output_len,scenario,"
               "output_tokens_per_s_per_gpu,engine,engine_version,request_rate,concurrency_or_batch,"
               "concurrency_kind").split(",")
RUNS_ROW = ("bad,g,Llama 3.1 70B,80,8192,28672,64,8,128256,h100-sxm5-80gb,8,8,1,fp8,fp8,1024,128,offline,400,trtllm,"
            "0.14.0,,,").split(",")
CLOSED_LOOP = {"scenario": "online", "concurrency_kind": "closed-loop concurrency"}


def runs_csv(tmp_path, changes: dict):
    path = tmp_path / "runs.csv"
    with open(path, "w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=RUNS_HEADER)
        writer.writeheader()
        writer.writerow({**dict(zip(RUNS_HEADER, RUNS_ROW)), **changes})
    return path


@pytest.mark.parametrize("changes, field, shown", [
    ({"engine_version": "abc"}, "engine_version", "(engine_version='abc')"),
    ({"engine_version": "1..2"}, "engine_version", "(engine_version='1..2')"),
    ({"engine_version": "-1.0"}, "engine_version", "(engine_version='-1.0')"),  # was read as release 1.0
    ({"engine": "trtllm@abc", "engine_version": ""}, "engine", "(engine='trtllm@abc')"),
], ids=["word", "two-dots", "negative", "in-the-engine-cell"])
def test_a_serving_runs_release_that_names_no_release_is_refused(changes, field, shown, tmp_path):
    """It was predicted with the family's current parameters, as if the cell were empty."""
    path = runs_csv(tmp_path, changes)
    for command in (["validate", path], ["calibrate", path, "--out", tmp_path / "c.yaml"]):
        assert_user_error(invoke(*command), str(path), f"field '{field}'", "row 'bad'",
                          "a release must begin with MAJOR.MINOR", shown, "leave it out where it is not known")
    assert not (tmp_path / "c.yaml").exists()


@pytest.mark.parametrize("version", ["0.14.0 (TensorRT engine, trtllm-bench)", "v0.14.1", "0.14"])
def test_a_serving_runs_release_with_a_note_or_a_v_still_reads(version, tmp_path):
    result = invoke("validate", runs_csv(tmp_path, {"engine_version": version}), "--json")
    assert result.exit_code == 0, result.output
    assert '"id": "bad"' in result.stdout


@pytest.mark.parametrize("changes, field, needle", [
    ({"request_rate": "-3"}, "request_rate", "request_rate > 0 must hold"),  # predicted -375 tokens/s per GPU
    ({"request_rate": "0"}, "request_rate", "request_rate > 0 must hold"),  # predicted 0, an error of -100%
    ({**CLOSED_LOOP, "concurrency_or_batch": "0"}, "concurrency_or_batch", "must be >= 1"),  # NaN warnings
    ({**CLOSED_LOOP, "concurrency_or_batch": "-4"}, "concurrency_or_batch", "must be >= 1"),
    ({"scenario": "static batch", "concurrency_or_batch": "-8"}, "concurrency_or_batch", "must be >= 1"),
    ({"input_len": "1e12"}, "input_len", "input_len <= 10,000,000 must hold"),  # predicted 1e-13 tokens/s
    ({**CLOSED_LOOP, "concurrency_or_batch": "1e15"}, "concurrency_or_batch", "<= 10,000,000 must hold"),
], ids=["negative-rate", "zero-rate", "zero-users", "negative-users", "negative-batch", "huge-input",
        "huge-users"])
def test_a_serving_runs_load_or_length_that_cannot_be_is_refused(changes, field, needle, tmp_path):
    path = runs_csv(tmp_path, changes)
    result = invoke("validate", path)
    assert_user_error(result, str(path), f"field '{field}'", "row 'bad'", needle)
    assert "RuntimeWarning" not in result.output


# --- 3. a RoPE scaling transformers does not name ---------------------------------------------------------------

LLAMA_CONFIG = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 4096,
                "intermediate_size": 14336, "num_attention_heads": 32, "num_key_value_heads": 8,
                "num_hidden_layers": 32, "vocab_size": 128256, "max_position_embeddings": 8192, "hidden_act": "silu"}
SERVE_LONG = ["--workload", "serve", "-H", "h100-sxm5-80gb", "--gpus", "8", "--input-len", "20000",
              "--output-len", "128", "-p", "tp=1"]


@pytest.mark.parametrize("key, kind", [("rope_type", "weird"), ("rope_type", "yarm"), ("type", "ntk")])
def test_a_rope_scaling_of_an_unknown_kind_is_refused_not_read_as_a_stretch(key, kind, tmp_path):
    """A factor of 4 under an unknown kind stretched the 8,192-token window to 32,768, so a 20,000-token prompt
    was predicted for a model that may not take it."""
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, "rope_scaling": {key: kind, "factor": 4.0}}))
    assert_user_error(invoke("predict", "-m", path, *SERVE_LONG), str(path), f"field 'rope_scaling.{key}'",
                      "must be one of yarn, linear, dynamic", f"({key}={kind!r})", "max_seq_len")


@pytest.mark.parametrize("kind, window", [("yarn", 32768), ("linear", 32768), ("llama3", 8192), ("default", 8192)])
def test_the_rope_scalings_transformers_names_still_read(kind, window, tmp_path):
    path = tmp_path / "config.json"
    path.write_text(json.dumps({**LLAMA_CONFIG, "rope_scaling": {"rope_type": kind, "factor": 4.0}}))
    result = invoke("models", "show", path)
    assert result.exit_code == 0, result.output
    assert re.search(rf"max_seq_len\s+\S\s+{window}\s", result.stdout), result.stdout


# --- 4. a serving space too large to enumerate --------------------------------------------------------------------

SERVE_SPACE = (ROOT / "search_spaces" / "serve.yaml").read_text()


def test_a_serving_space_too_large_to_enumerate_is_refused_before_any_plan_is_built(tmp_path):
    """3,000 tp choices made 16.6 million plans on 8 GPUs; the exact search ran for minutes without a word."""
    path = tmp_path / "space.yaml"
    path.write_text(SERVE_SPACE.replace("tp: [1, 2, 4, 8]", "tp: [" + ", ".join(map(str, range(1, 3001))) + "]", 1))
    started = time.monotonic()
    result = invoke("search", *SERVE, "--space", path)
    assert time.monotonic() - started < 30
    assert_user_error(result, str(path), "field 'axes'", "must enumerate at most 2,000,000 plans",
                      "16,582,240 plans on 8 GPUs", "tp 3,000", "list fewer choices")


def test_a_serving_space_of_a_few_more_choices_still_searches(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    path = tmp_path / "space.yaml"
    path.write_text(SERVE_SPACE.replace("tp: [1, 2, 4, 8]", "tp: [1, 2, 3, 4, 5, 6, 7, 8]", 1))
    result = invoke("search", *SERVE, "--space", path)
    assert result.exit_code == 0, result.output


# --- 5. a calibration --out that is not a file ------------------------------------------------------------------

SILICON_CSV = ROOT / "autotune" / "data" / "serving_silicon.csv"


def small_silicon(tmp_path):
    path = tmp_path / "silicon.csv"
    path.write_text("".join(SILICON_CSV.read_text(encoding="utf-8-sig").splitlines(keepends=True)[:4]))
    return path


@pytest.mark.parametrize("force", [[], ["--force"]], ids=["plain", "force"])
def test_calibrate_refuses_a_named_pipe_as_out_rather_than_wait_on_it(force, tmp_path):
    """With --force the overlay was opened for writing: a named pipe with no reader waited forever (and a device,
    /dev/sda as root, would have been written through)."""
    pipe = tmp_path / "calib.yaml"
    os.mkfifo(pipe)
    assert_user_error(invoke("calibrate", small_silicon(tmp_path), "--out", pipe, *force), str(pipe),
                      "is not a regular file (a named pipe, socket or device)", "choose another --out")


def test_calibrate_refuses_a_device_as_out():
    assert_user_error(invoke("calibrate", SILICON_CSV, "--out", "/dev/null", "--force"), "/dev/null",
                      "is not a regular file")


def test_a_write_refused_after_the_checks_names_the_file_and_out(tmp_path, monkeypatch):
    """A file the checks pass but the write refuses (/proc/version as root fails with EIO): the write's OSError is
    made to happen here for any user, so the test runs everywhere."""
    out = tmp_path / "calib.yaml"
    real = Path.write_text

    def refuse(self, *args, **kwargs):
        if self == out:
            raise OSError(5, "Input/output error")
        return real(self, *args, **kwargs)

    monkeypatch.setattr(Path, "write_text", refuse)
    assert_user_error(invoke("calibrate", small_silicon(tmp_path), "--out", out),
                      f"{out}: field '--out': cannot be written", "choose another --out")
