"""The README's example output is what the command prints today (so it cannot drift silently)."""

from __future__ import annotations

import re
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app

README = Path(__file__).resolve().parent.parent / "README.md"


def test_readme_example_matches_the_command():
    text = README.read_text()
    command = re.search(r"^\$ autotune (search .+)$", text, re.MULTILINE).group(1).split()
    expected_best = re.search(r"^Best: .+$", text, re.MULTILINE).group(0)
    result = CliRunner().invoke(app, command)
    assert result.exit_code == 0, result.output
    best = next(line for line in result.stdout.splitlines() if line.startswith("Best: "))
    assert best == expected_best, "regenerate the README example: the search now answers differently"
    # the table's rows too (their error bands come from the validation residuals, which a refit changes)
    example = text[text.index("$ autotune search"):]
    example = example[:example.index("```")]
    expected_rows = [line for line in example.splitlines() if line.startswith("│")]
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert expected_rows and rows == expected_rows, "regenerate the README example's table"
