"""A CSV of measured runs, read at the edge: the file, its encoding, its header, its ids and its numbers.

Training runs (``training/runs.py``) and serving runs (``serving/runs.py``) keep their own row
parsing; both read the file through :func:`read_table` and their numbers through :func:`number`,
so that every way a file can be wrong is said the same way, naming the file, the row id and the
column:

* a folder, a missing file, an empty file;
* text that is not UTF-8 (UTF-16 from a spreadsheet, Latin-1 bytes); Excel's UTF-8 byte-order
  mark is accepted;
* a header that names a column twice, or lacks a required column;
* two rows with the same id, a row without an id, a row with more cells than the header;
* a number cell that is not a number, not finite (NaN, inf) or absurdly large.

A row that is well formed but cannot be predicted (a layout that does not multiply out to the
GPU count, say) is not an error of the file: the reader keeps it as a skipped row with its reason
(:class:`RowSkipped`, :func:`parse_rows`).
"""

from __future__ import annotations

import codecs
import csv
import io
import math
import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from ..errors import InputError
from .loading import check_regular_file

# A cell beyond this is a typo (or an overflow), not a measurement or a size.
MAX_CELL = 1e15
_UTF16_32_BOMS = ((codecs.BOM_UTF32_LE, "UTF-32"), (codecs.BOM_UTF32_BE, "UTF-32"),
                  (codecs.BOM_UTF16_LE, "UTF-16"), (codecs.BOM_UTF16_BE, "UTF-16"))
SAVE_AS_UTF8 = "save it as UTF-8 (in Excel: Save As > CSV UTF-8)"

T = TypeVar("T")


@dataclass(frozen=True)
class CsvTable:
    """The rows of a CSV file as dictionaries of stripped column names to cell text."""

    source: str
    columns: tuple[str, ...]
    rows: tuple[dict[str, str], ...]


class RowSkipped(Exception):
    """Raised by a row parser for a well-formed row that cannot be used; the message is the reason."""


def _text(path: Path) -> str:
    source = str(path)
    if path.is_dir():
        raise InputError("is a folder; give the CSV file itself", source=source)
    check_regular_file(path, pipes=False)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        raise InputError("file not found; check the path", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror or exc}); check the path and its permissions",
                         source=source) from None
    for bom, name in _UTF16_32_BOMS:
        if data.startswith(bom):
            raise InputError(f"is {name} text; {SAVE_AS_UTF8}", source=source)
    if b"\x00" in data[:4096]:
        raise InputError(f"holds NUL bytes (UTF-16 text, or not a text file); {SAVE_AS_UTF8}", source=source)
    try:
        return data.decode("utf-8-sig")  # accepts Excel's UTF-8 byte-order mark
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise InputError(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} on line {line}, e.g. Latin-1 or "
                         f"Windows-1252); {SAVE_AS_UTF8}", source=source) from None


_YAML_KEY = re.compile(r"[A-Za-z_][\w.-]*:(\s|$)")


def _not_a_csv(text: str) -> str:
    """What a file given as runs looks like when it is plainly another kind (a JSON document, a YAML profile or
    overlay), judged by its content, not its name: said as such, not diagnosed as a CSV with odd delimiters or
    ragged rows.  A YAML file's first line that is not a comment is a bare ``key:`` without commas, semicolons or
    tabs; a CSV header (even one whose first cell is ``#`` or holds a colon) has its delimiters."""
    head = text.lstrip()
    if head.startswith(("{", "[")):
        return "a JSON document"
    first = next((line.strip() for line in head.splitlines() if line.strip() and not line.lstrip().startswith("#")),
                 "")
    if _YAML_KEY.match(first) and not any(mark in first for mark in (",", ";", "\t")):
        return "a YAML file"
    return ""


def read_columns(path: Path) -> tuple[str, ...]:
    """The header row of a CSV file (checked as :func:`read_table` checks it)."""
    return read_table(path, required=()).columns


def read_table(path: Path, *, required: Sequence[str], schema: str = "", id_column: str = "id") -> CsvTable:
    """Read and check a CSV of measured runs; raises :class:`InputError` naming the file (and row, column)."""
    source = str(path)
    text = _text(Path(path))
    see = f"; see {schema} for the schema" if schema else ""
    looks = _not_a_csv(text)
    if looks:
        raise InputError(f"is {looks}, not a CSV of measured runs; give the CSV (one header row of column names, "
                         f"then one row per run){see}", source=source)
    try:
        records = [r for r in csv.reader(io.StringIO(text, newline=""), strict=True) if any(c.strip() for c in r)]
    except csv.Error as exc:
        raise InputError(f"malformed CSV ({exc}); check its quoting", source=source) from None
    if not records:
        raise InputError(f"empty file; expected a CSV header row{see}", source=source)
    columns = tuple(cell.strip() for cell in records[0])
    if len(columns) == 1:  # one column: most likely another delimiter (a spreadsheet's ';' or a TSV's tab)
        for name, mark in (("semicolons", ";"), ("tabs", "\t")):
            if mark in columns[0]:
                raise InputError(f"the header is one column separated by {name} ({columns[0][:60]!r}); save the file "
                                 f"with commas between the columns{see}", source=source)
    seen: set[str] = set()
    twice = sorted({c for c in columns if c in seen or seen.add(c)})  # type: ignore[func-returns-value]
    if twice:
        raise InputError(f"the header names column(s) {', '.join(repr(c) for c in twice)} more than once; keep one "
                         "of each", source=source)
    if "" in columns:
        raise InputError(f"the header has an empty column name (column {columns.index('') + 1}); name it or delete "
                         "it", source=source)
    absent = [c for c in required if c not in columns]
    if absent:
        raise InputError(f"missing column(s) {', '.join(absent)}{see}", source=source)
    rows: list[dict[str, str]] = []
    first_line: dict[str, int] = {}
    for number_, record in enumerate(records[1:], start=2):
        if len(record) > len(columns):
            extra = [c for c in record[len(columns):] if c.strip()]
            if extra:
                raise InputError(f"row {number_} has {len(record)} cells but the header names {len(columns)} "
                                 "columns; quote cells that hold commas", source=source)
        row = {c: (record[i].strip() if i < len(record) else "") for i, c in enumerate(columns)}
        if id_column in columns:
            rid = row[id_column]
            if not rid:
                raise InputError(f"row {number_} has no {id_column}; give every row a unique {id_column}",
                                 source=source, field=id_column)
            if rid in first_line:
                raise InputError(f"id {rid!r} appears twice (rows {first_line[rid]} and {number_}); give every row "
                                 "a unique id", source=source, field=id_column)
            first_line[rid] = number_
        rows.append(row)
    return CsvTable(source=source, columns=columns, rows=tuple(rows))


def number(row: dict, key: str, *, whole: bool = False, minimum: float | None = None, maximum: float | None = None,
           id_column: str = "id") -> float | int | None:
    """A number cell: None when empty; a finite number of sane size, else :class:`InputError` naming the row and
    column.  ``whole``: an integer (``8`` or ``8.0``, not ``8.5``); ``minimum`` and ``maximum``: the range allowed."""
    text = (row.get(key) or "").strip()
    if not text:
        return None
    where = f"row {row.get(id_column)!r}: "
    try:
        value = float(text)
    except ValueError:
        raise InputError(f"{where}must be a number, but got {text!r}", field=key) from None
    if not math.isfinite(value):
        raise InputError(f"{where}must be a finite number, but got {text!r}", field=key)
    if abs(value) > MAX_CELL:
        raise InputError(f"{where}must be at most {MAX_CELL:g} in size, but got {text!r}", field=key)
    if whole:
        if value != int(value):
            raise InputError(f"{where}must be a whole number, but got {text!r}", field=key)
        value = int(value)
    if minimum is not None and value < minimum:
        raise InputError(f"{where}must be >= {minimum:g}, but got {text!r}", field=key)
    if maximum is not None and value > maximum:
        raise InputError(f"{where}must be <= {maximum:g}, but got {text!r}", field=key)
    return value


def parse_rows(table: CsvTable, parse: Callable[[dict], T], skipped: Callable[[dict, str], T]) -> list[T]:
    """``parse`` every row; a row it refuses with :class:`RowSkipped` becomes ``skipped(row, reason)``.  Errors in
    a row name the file."""
    out: list[T] = []
    for row in table.rows:
        try:
            out.append(parse(row))
        except RowSkipped as exc:
            out.append(skipped(row, str(exc)))
        except InputError as exc:
            raise InputError(str(exc), source=table.source) from None
    return out


def layout_reason(n_gpus: int | None, sizes: Iterable[tuple[str, int | None]], dp: int | None = None) -> str:
    """Why a row's parallel sizes do not make up its GPU count ("" when they do, or when the count is unknown)."""
    product = 1
    names = []
    for name, size in sizes:
        if size is not None:
            product *= size
            names.append(name)
    if n_gpus is None or not names:
        return ""
    if dp is not None:
        if product * dp != n_gpus:
            return (f"layout does not multiply out: {'*'.join(names)}*dp = {product * dp}, but n_gpus = {n_gpus}")
        return ""
    if n_gpus % product:
        return f"layout does not multiply out: {'*'.join(names)} = {product} does not divide n_gpus = {n_gpus}"
    return ""


__all__ = ["CsvTable", "MAX_CELL", "RowSkipped", "layout_reason", "number", "parse_rows", "read_columns",
           "read_table"]
