"""Edges a bad-input sweep (round 7) found by trying the CLI with hostile files: a YAML alias bomb hidden in a
hardware profile's sources (accepted after a minute and gigabytes of memory), an alias inside the value it names,
and cells of a serving-runs CSV that were read as a prediction without a word.

Each case runs as a person would type it, through typer's CliRunner: a user error is one line naming the file,
the field and a fix, exit status 2, no traceback."""

from __future__ import annotations

import time

import pytest

from tests.test_bad_input import PROFILE, SPEC, assert_user_error, invoke

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
