"""The ``autotune`` command line.

``app`` holds the Typer app and what commands share; each command group has its own module,
which registers its commands on ``app`` when imported, and none imports another.
"""

from importlib import import_module

from .app import app, main

# In the order `autotune --help` lists them.
COMMAND_MODULES = ("search", "accuracy", "emit", "report", "study", "catalog")
for _name in COMMAND_MODULES:
    import_module(f"{__name__}.{_name}")

__all__ = ["app", "main"]
