"""Shared test set-up."""

from __future__ import annotations

import functools

import typer.testing

# CliRunner.invoke builds the click command from the Typer app on every call, inspecting every command's
# signature (about 0.1 s, a third of a small command's run; the CLI fuzz test makes 1,300 calls). The app is the
# same object throughout, so its command is built once. Guarded: a Typer without this helper builds it as before.
if hasattr(typer.testing, "_get_command"):
    typer.testing._get_command = functools.lru_cache(maxsize=None)(typer.testing._get_command)
