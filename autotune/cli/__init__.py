"""The ``autotune`` command line: ``app`` holds the Typer app and what commands share."""

from .app import app, main

__all__ = ["app", "main"]
