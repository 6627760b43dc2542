"""Writing bash safely: every value that reaches a script goes through :func:`word`.

A value from the user (a model name, a data path, a tokenizer name) is always
single-quoted with :func:`shlex.quote`, so spaces, quotes, ``$()`` and backticks
stay literal text.  The only unquoted text in a script is :class:`Raw`: fixed
fragments written in this package (``"${MEGATRON_LM_DIR}/pretrain_gpt.py"``),
never built from input.  Comments are cleaned too: a newline inside a comment
would end it and start a command.
"""

from __future__ import annotations

import re
import shlex
from typing import Iterable, Sequence, Union

_CONTROL = re.compile(r"[\x00-\x1f\x7f\u0085\u2028\u2029]")
_JOB_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")


class Raw(str):
    """A fixed shell fragment authored in this package; written as is, without quoting."""

    __slots__ = ()


Word = Union[str, int, float, Raw]


def word(value: Word) -> str:
    """One shell word: a :class:`Raw` fragment as is, anything else quoted."""
    if isinstance(value, Raw):
        return str(value)
    if isinstance(value, bool):
        raise TypeError("a shell word cannot be a bool; render flags explicitly")
    return shlex.quote(str(value))


def words(values: Iterable[Word]) -> list[str]:
    return [word(v) for v in values]


def clean_comment(text: str) -> str:
    """Text safe inside a ``#`` comment: control characters (newlines too) become ``?``."""
    return _CONTROL.sub("?", str(text))


def comment_lines(lines: Iterable[str], prefix: str = "# ") -> list[str]:
    return [(prefix + clean_comment(line)).rstrip() for line in lines]


def job_name(text: str) -> str:
    """A Slurm job name from free text: letters, digits, '.', '_' and '-' only."""
    cleaned = _JOB_NAME_UNSAFE.sub("-", str(text)).strip("-")
    return cleaned[:64] or "autotune"


def assignment(name: str, value: Word) -> str:
    """``NAME=value`` with the value quoted (``name`` is a constant of this package)."""
    _check_name(name)
    return f"{name}={word(value)}"


def default_assignment(name: str, value: Word) -> str:
    """``NAME`` keeps a value from the environment, else takes ``value`` (quoted)."""
    _check_name(name)
    return f'if [[ -z "${{{name}:-}}" ]]; then {name}={word(value)}; fi'


Group = Sequence[Word]


def flatten(groups: Iterable[Group]) -> list[Word]:
    return [item for group in groups for item in group]


def array(name: str, groups: Iterable[Group], indent: str = "    ") -> list[str]:
    """A bash array, one group (a flag and its values) per line."""
    _check_name(name)
    rows = [" ".join(words(group)) for group in groups if len(group)]
    if not rows:
        return [f"{name}=()"]
    return [f"{name}=("] + [indent + row for row in rows] + [")"]


def command(groups: Iterable[Group], indent: str = "    ") -> list[str]:
    """A command over several lines joined by backslashes, one group per line."""
    rows = [" ".join(words(group)) for group in groups if len(group)]
    rendered = rows[:1] + [indent + row for row in rows[1:]]
    return [line + " \\" for line in rendered[:-1]] + rendered[-1:]


def _check_name(name: str) -> None:
    if not re.fullmatch(r"[A-Z_][A-Z0-9_]*", name):
        raise ValueError(f"shell variable names are upper-case constants, but got ({name!r})")
