"""Every example in examples/ runs as a user would run it: from another folder, with the installed command."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = sorted(p for p in EXAMPLES.iterdir() if p.suffix in (".sh", ".py") and p.name[0].isdigit())


def test_every_example_is_listed_in_its_readme():
    readme = (EXAMPLES / "README.md").read_text()
    assert len(SCRIPTS) >= 6
    assert [p.name for p in SCRIPTS if f"`{p.name}`" not in readme] == []


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_example_runs(script, tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"),
           # The `autotune` command installed beside this interpreter, as after `pip install .`.
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    (tmp_path / "out").mkdir()
    command = ["bash", str(script)] if script.suffix == ".sh" else [sys.executable, str(script)]
    done = subprocess.run(command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    assert done.stdout.strip()
