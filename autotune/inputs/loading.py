"""Reading YAML and JSON files at the edge, with errors that name the file."""

from __future__ import annotations

import json
import math
import re
import stat
from pathlib import Path
from typing import Any

import yaml

from ..errors import InputError

# A model spec's bounds (its own YAML and a converted config.json): beyond these a spec is a typo; the space
# enumerates pipeline splits per layer, and sizes this large overflow.
MAX_LAYERS = 100_000
MAX_SIZE = 10**8

# Numbers in an input file beyond these magnitudes are typos (or attacks), not hardware or models:
# refusing them at the edge keeps infinities and overflows out of the cost model.
MAX_NUMBER = 1e15
MAX_INTEGER = 10**9
# Values a YAML file may hold once its aliases (*name) are expanded.  An alias shares its anchor's value, so nine
# lines of nested aliases expand to 9**9 values (a "billion laughs"): cheap to parse, but every reader that walks
# the mapping (checks, copies, JSON written into plans.json) then takes minutes and gigabytes.  A hand-written
# profile, spec, space or overlay holds a few thousand at most.
MAX_YAML_VALUES = 1_000_000


# libyaml's parser where PyYAML was built with it (the wheels are): the same documents and nodes, about ten times
# faster than the pure-Python one, which took most of the time of a command reading a few bundled profiles.
_BASE_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_BASE_LOADER):  # type: ignore[misc, valid-type]
    """PyYAML's safe loader, reading ``6e-1`` and ``1e308`` as numbers.

    PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent, so the exponent forms a fit
    or a person writes (``6e-1``, ``1e308``, ``5.5e3``) would be strings and refused as "not a number".
    A quoted ``'6e-1'`` stays a string; ``1e999`` reads as infinity, which the bounds refuse.
    """


# YAML 1.1 also reads 1:20 as 80 (base 60), 0x20 as 32 and 010 as 8: a typo of 120 or a zero-padded 10 became
# another model without a word.  Numbers are decimal here; those forms stay text, which a number field refuses
# naming itself.  (The resolver lists are rebuilt, not edited: they are shared with PyYAML's own loaders.)
_NUMBER_TAGS = ("tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
_Loader.yaml_implicit_resolvers = {
    first: [(tag, regexp) for tag, regexp in entries if tag not in _NUMBER_TAGS]
    for first, entries in _BASE_LOADER.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver("tag:yaml.org,2002:int", re.compile(r"^[-+]?(?:0|[1-9][0-9_]*)$"),
                              list("-+0123456789"))
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9][0-9_]*)\.[0-9_]*(?:[eE][-+][0-9]+)?|[-+]?\.[0-9][0-9_]*(?:[eE][-+][0-9]+)?"
               r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$"),
    list("-+0123456789."),
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _mappings(node: yaml.Node, path: tuple[str, ...] = (), seen_nodes: set | None = None):
    """Every mapping node under ``node`` with its dotted path, each visited once (aliases share nodes, so anchors
    cannot loop or blow up)."""
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        yield path, node
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            yield from _mappings(value_node, (*path, name) if name is not None else path, seen_nodes)
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            yield from _mappings(item, (*path, str(i)), seen_nodes)


def _duplicate_key(node: yaml.Node) -> tuple[str, int] | None:
    """``(dotted key, line)`` of the first key a YAML mapping holds twice, else None.

    A YAML mapping keeps the last of two equal keys, so a second ``vllm:`` under ``engines:`` would drop the
    first block without a word.
    """
    for path, mapping in _mappings(node):
        keys: set[str] = set()
        for key_node, _ in mapping.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if name is not None and key_node.tag != "tag:yaml.org,2002:merge":  # `<<:` merges may repeat
                if name in keys:
                    return ".".join((*path, name)), key_node.start_mark.line + 1
                keys.add(name)
    return None


_KEY_READS_AS = {"tag:yaml.org,2002:bool": "true/false", "tag:yaml.org,2002:int": "a number",
                 "tag:yaml.org,2002:float": "a number", "tag:yaml.org,2002:null": "null"}


def _non_text_key(node: yaml.Node) -> tuple[str, str, int, str] | None:
    """``(dotted path, key, line, what it reads as)`` of the first mapping key YAML reads as other than text: YAML
    1.1 reads ``off:``, ``yes:`` and ``on:`` as booleans, ``7:`` as a number and ``~:`` as null, which no field of
    these files is named (they had crashed the key checks)."""
    for path, mapping in _mappings(node):
        for key_node, _ in mapping.value:
            if not isinstance(key_node, yaml.ScalarNode):
                return ".".join(path), "a list or mapping", key_node.start_mark.line + 1, "a collection"
            if key_node.tag in _KEY_READS_AS:
                return ".".join(path), key_node.value, key_node.start_mark.line + 1, _KEY_READS_AS[key_node.tag]
    return None


class _SelfReference(Exception):
    def __init__(self, line: int) -> None:
        self.line = line


def _expanded_values(node: yaml.Node, sizes: dict[int, int], open_nodes: set[int]) -> int:
    """How many values ``node`` stands for once every alias under it is written out (a mapping counts its keys and
    values).  Shared nodes are counted once per use but visited once (``sizes``), so a bomb is measured in linear
    time; an alias inside the value it names raises :class:`_SelfReference` (it would expand forever)."""
    key = id(node)
    if key in sizes:
        return sizes[key]
    if key in open_nodes:
        raise _SelfReference(node.start_mark.line + 1)
    open_nodes.add(key)
    if isinstance(node, yaml.MappingNode):
        children = [child for pair in node.value for child in pair]
    elif isinstance(node, yaml.SequenceNode):
        children = list(node.value)
    else:
        children = []
    total = 1 + sum(_expanded_values(child, sizes, open_nodes) for child in children)
    open_nodes.discard(key)
    sizes[key] = total
    return total


def _load_yaml(text: str, *, source: str) -> Any:
    """YAML through :class:`_Loader`, refusing a key held twice (errors of the YAML itself pass through)."""
    loader = _Loader(text)
    try:
        node = loader.get_single_node()
        found = _duplicate_key(node) if node is not None else None
        if found:
            key, line = found
            raise InputError(f"holds the key {key.rsplit('.', 1)[-1]!r} twice (line {line}), and YAML keeps only "
                             "the last; keep one", source=source, field=key)
        odd = _non_text_key(node) if node is not None else None
        if odd:
            where, key, line, what = odd
            raise InputError(f"has the key {key!r} at line {line}, which YAML reads as {what}, not a name; quote it "
                             f"('{key}') if it is meant, or remove it", source=source, field=where or None)
        if node is not None:
            try:
                values = _expanded_values(node, {}, set())
            except _SelfReference as exc:
                raise InputError(f"holds an alias (*name) inside the value its anchor (&name) names, at line "
                                 f"{exc.line}, which would expand forever; write the value out", source=source) from None
            if values > MAX_YAML_VALUES:
                raise InputError(f"its aliases (*name) must expand to at most {MAX_YAML_VALUES:,} values, but got "
                                 f"{values:,}; write the values out once, without nesting aliases of aliases",
                                 source=source)
        return loader.construct_document(node) if node is not None else None
    finally:
        loader.dispose()


def repeated_key(pairs: list[tuple[str, Any]]) -> str | None:
    """The first key a JSON object states twice (``json`` would keep the last, silently); None if none is."""
    seen: set = set()
    for key, _ in pairs:
        if key in seen:
            return key
        seen.add(key)
    return None


def _no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict:
    twice = repeated_key(pairs)
    if twice is not None:
        raise InputError(f"holds the key {twice!r} twice in one object, and JSON keeps only the last; keep one",
                         field=twice)
    return dict(pairs)


# A pipe reached through a descriptor (bash's <(...) gives /dev/fd/63; /dev/stdin) has a writer, so it is read
# as a file; a named pipe (mkfifo) may have none, and reading it would wait forever.
_DESCRIPTOR_PATH = re.compile(r"^/(dev/(stdin|fd/\d+)|proc/(self|\d+)/fd/\d+)$")


def check_regular_file(path: Path, *, pipes: bool = True) -> None:
    """Refuse a named pipe, socket or device before reading it; a pipe given by descriptor is read, unless
    ``pipes`` is false (a file that is read more than once)."""
    try:
        mode = path.stat().st_mode  # through symlinks
    except OSError:  # missing, too long or unreadable: the read that follows reports it
        return
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
        return
    if stat.S_ISFIFO(mode) and _DESCRIPTOR_PATH.match(str(path)):
        if pipes:
            return
        raise InputError("is a pipe, and this file is read more than once; save it to a file and give that",
                         source=str(path))
    raise InputError("is not a regular file (a named pipe, socket or device); give the file itself",
                     source=str(path))


def read_mapping(path: Path) -> dict[str, Any]:
    """Read a YAML (or JSON) file whose top level must be a mapping (a key held twice is refused; ``6e-1`` is a
    number)."""
    source = str(path)
    check_regular_file(path)
    if path.suffix.lower() in (".csv", ".tsv"):  # a table of runs: its first row read as YAML said 'malformed YAML'
        raise InputError("is a table (CSV), not the YAML or JSON this option reads; a runs or silicon CSV goes to "
                         "`autotune validate` or `autotune calibrate`", source=source)
    try:
        text = path.read_text()
    except UnicodeDecodeError:
        raise InputError("is not a text file (not UTF-8); give a YAML or JSON file", source=source) from None
    except IsADirectoryError:
        raise InputError("is a folder; give a YAML or JSON file", source=source) from None
    except FileNotFoundError:
        raise InputError("file not found; check the path", source=source) from None
    except OSError as exc:
        raise InputError(f"cannot read file ({exc.strerror})", source=source) from None
    try:
        if path.suffix == ".json":
            data = load_json(text, source=source)
        else:
            data = _load_yaml(text, source=source)
    except RecursionError:
        raise InputError("is nested too deeply to read; give a flat mapping of keys to values", source=source) from None
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}", source=source) from None
    except yaml.YAMLError as exc:
        if "maximum nesting depth" in str(exc):  # libyaml's limit (1,000 levels), where Python's parser recursed
            raise InputError("is nested too deeply to read; give a flat mapping of keys to values",
                             source=source) from None
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = (getattr(exc, "problem", None) or str(exc)).splitlines()[0]  # not PyYAML's '<unicode string>' line
        raise InputError(f"malformed YAML{where}: {problem}", source=source) from None
    if data is None:
        raise InputError("is empty; it must hold a mapping of keys to values", source=source)
    if not isinstance(data, dict):
        raise InputError(f"top level must be a mapping of keys to values, but got a {type(data).__name__}", source=source)
    return data


def _reject_constant(name: str) -> float:
    raise InputError(f"holds {name}, which is not a number JSON allows; write a finite number")


def _finite_float(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise InputError(f"holds the number {text}, which overflows; write a finite number")
    return value


def load_json(text: str, *, source: str) -> Any:
    """JSON as the standard allows it: NaN, Infinity and overflowing numbers are errors naming ``source``.

    Raises :class:`InputError` for those and for numbers too long to read; ``json.JSONDecodeError``
    and ``RecursionError`` pass through for the caller to word.
    """
    text = text.removeprefix("\ufeff")  # a byte-order mark some Windows editors write is not content (RFC 8259 8.1)
    try:
        return json.loads(text, parse_constant=_reject_constant, parse_float=_finite_float,
                          object_pairs_hook=_no_duplicate_pairs)
    except InputError as exc:
        raise InputError(exc.message, source=source, field=exc.field) from None
    except json.JSONDecodeError:
        raise
    except ValueError as exc:  # an integer longer than Python reads (int_max_str_digits)
        raise InputError(f"holds a number too long to read ({str(exc)[:80]}); write a finite number",
                         source=source) from None


def is_finite_number(value: Any) -> bool:
    """A JSON number a float can hold, finite: not a bool, NaN, Infinity (Python's json reads both) or an integer
    beyond float range (10**400, which float() overflows on and NumPy cannot test)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        return math.isfinite(float(value))
    except OverflowError:
        return False


def check_finite(value: float, *, source: str | None = None, field: str | None = None,
                 limit: float = MAX_NUMBER) -> float:
    """``value`` when it is a finite number no larger than ``limit`` in size, else an error naming the field."""
    if isinstance(value, float) and not math.isfinite(value):
        raise InputError(f"must be a finite number, but got {value!r}", source=source, field=field)
    if abs(value) > limit:
        raise InputError(f"must be at most {limit:g} in size, but got {value!r}", source=source, field=field)
    return value


def number(data: dict, key: str, *, source: str, section: str = "", positive: bool = True,
           minimum: float | None = None, maximum: float | None = None, default: Any = ...) -> float:
    """Fetch a number, with a clear error if it is missing, not a number or out of range."""
    field = f"{section}.{key}" if section else key
    if key not in data or data[key] is None:
        if default is ...:
            raise InputError("is required (a number)", source=source, field=field)
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise InputError(f"must be a number, but got {value!r}", source=source, field=field)
    check_finite(value, source=source, field=field, limit=MAX_NUMBER if maximum is None else max(MAX_NUMBER, maximum))
    if positive and value <= 0:
        raise InputError(f"must be > 0, but got {value!r}", source=source, field=field)
    if minimum is not None and value < minimum:
        raise InputError(f"must be >= {minimum}, but got {value!r}", source=source, field=field)
    if maximum is not None and value > maximum:
        raise InputError(f"must be <= {maximum}, but got {value!r}", source=source, field=field)
    return value


def integer(data: dict, key: str, *, source: str, section: str = "", minimum: int = 1, default: Any = ...,
            maximum: int = MAX_INTEGER) -> int:
    field = f"{section}.{key}" if section else key
    if key not in data or data[key] is None:
        if default is ...:
            raise InputError("is required (an integer)", source=source, field=field)
        return default
    value = data[key]
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"must be an integer, but got {value!r}", source=source, field=field)
    if value < minimum:
        raise InputError(f"must be >= {minimum}, but got {value!r}", source=source, field=field)
    if value > maximum:
        raise InputError(f"must be <= {maximum:,}, but got {value!r}", source=source, field=field)
    return value


_NAME_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f\u2028\u2029]")


def has_control_character(value: str) -> bool:
    """Whether a name holds a control character (line break, tab, terminal escape): refused in names."""
    return bool(_NAME_CONTROL.search(value))


def text(data: dict, key: str, *, source: str, section: str = "", default: Any = ...,
         choices: tuple[str, ...] | None = None, blank: bool = True) -> str:
    """Fetch a string; ``blank=False``: one that is empty or only spaces is refused (a name things are known by)."""
    field = f"{section}.{key}" if section else key
    if key not in data or data[key] is None:
        if default is ...:
            raise InputError("is required (a string)", source=source, field=field)
        return default
    value = data[key]
    if not isinstance(value, str):
        raise InputError(f"must be a string, but got {value!r}", source=source, field=field)
    if not blank and not value.strip():
        raise InputError(f"must not be empty, but got {value!r}; give the name it is shown and recorded by",
                         source=source, field=field)
    if not blank and has_control_character(value):
        # a name is printed to the terminal and into launch-file comments: an escape sequence recoloured or
        # rewrote the terminal, a line break split the header line
        raise InputError(f"must not hold a control character (a line break, tab or terminal escape), but got "
                         f"{value!r}; give the name on one line of printable characters", source=source, field=field)
    if choices is not None and value not in choices:
        raise InputError(f"must be one of {', '.join(choices)}, but got {value!r}", source=source, field=field)
    return value


def boolean(data: dict, key: str, *, source: str, section: str = "", default: Any = ...) -> bool:
    field = f"{section}.{key}" if section else key
    if key not in data or data[key] is None:
        if default is ...:
            raise InputError("is required (true or false)", source=source, field=field)
        return default
    value = data[key]
    if not isinstance(value, bool):
        raise InputError(f"must be true or false, but got {value!r}", source=source, field=field)
    return value


def strict_json(value: Any) -> Any:
    """``value`` with every non-finite number (an infinite prediction, a NaN mean) as None: what autotune writes
    must be standard JSON, which has no NaN or Infinity (jq and JavaScript reject them)."""
    if isinstance(value, dict):
        return {k: strict_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [strict_json(v) for v in value]
    if isinstance(value, float):  # numpy's float64 is a float too
        return value if math.isfinite(value) else None
    return value


def as_written(value: Any) -> str:
    """``value`` as YAML writes it (``null``, ``{a: 1}``, ``.nan``, ``[1, 2]``), for an error about a value read from
    YAML: Python's repr (``None``, ``{'a': 1}``) is not what the user wrote."""
    try:
        shown = yaml.safe_dump(value, default_flow_style=True, width=10**6).strip()
    except yaml.YAMLError:
        return repr(value)
    return shown[:-4].rstrip() if shown.endswith("\n...") else shown


def distinct_choices(values: list, raw: list, *, source: str, field: str) -> tuple:
    """The choices of a search-space axis, each listed once: ``values`` are the choices read from ``raw`` (the list
    as written).  A choice listed twice (``tp: [2, 2, 4]``, or ``[2, "2"]``, which read the same) is refused, naming
    it: a repeat is a slip for another value more often than a choice, and collapsing it would search a space other
    than the one written."""
    seen: dict[Any, Any] = {}
    for value, written in zip(values, raw):
        key = (type(value), value)
        if key in seen:
            key_name = field.rsplit(".", 1)[-1]
            first, again = seen[key], written
            same = f"{as_written(first)} twice" if first == again and type(first) is type(again) else \
                f"{as_written(first)} and {as_written(again)}, the same choice"
            raise InputError(f"must list each choice once, but got ({key_name}={as_written(raw)}: {same}); remove the "
                             "repeat or write the value you meant", source=source, field=field)
        seen[key] = written
    return tuple(values)
