"""A calibration overlay: fitted efficiency values laid over bundled hardware profiles.

``autotune calibrate`` writes it (:mod:`autotune.training.calibration` fits it); ``--calibration
FILE`` reads it back here, at the edge, checking every profile name, key and bound::

    hardware:
      h100-sxm5-80gb:
        efficiency: {gemm: 0.57, attention: 0.21, ...}
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from ..errors import InputError
from . import loading
from .hardware import (
    EFFICIENCY_FIELDS,
    Hardware,
    efficiency_from_mapping,
    hardware_names,
)


@dataclass(frozen=True)
class Calibration:
    """A calibration overlay: per profile name, efficiency values that replace the profile's."""

    efficiency: Mapping[str, Mapping[str, float]]
    source: str = "<in memory>"
    about: Mapping[str, Any] = field(default_factory=dict)

    def to_mapping(self) -> dict:
        out: dict[str, Any] = {"hardware": {name: {"efficiency": dict(values)} for name, values in self.efficiency.items()}}
        if self.about:
            out["about"] = dict(self.about)
        return out


def calibration_from_mapping(data: Mapping[str, Any], *, source: str, known_profiles: Iterable[str] | None = None) -> Calibration:
    """Check an overlay mapping: ``hardware.<profile>.efficiency.<parameter>`` with values within bounds."""
    if not isinstance(data, Mapping):
        raise InputError("top level must be a mapping with a 'hardware' key", source=source)
    unknown = sorted(set(data) - {"hardware", "about"})
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(unknown)}; allowed: about, hardware", source=source, field=unknown[0])
    hardware = data.get("hardware")
    if not isinstance(hardware, Mapping) or not hardware:
        raise InputError("must map profile names to {efficiency: {...}}", source=source, field="hardware")
    known = set(hardware_names() if known_profiles is None else known_profiles)
    efficiency: dict[str, dict[str, float]] = {}
    for name, block in hardware.items():
        where = f"hardware.{name}"
        if name not in known:
            raise InputError(f"unknown hardware profile {name!r}; profiles: {', '.join(sorted(known))}",
                             source=source, field=where)
        if not isinstance(block, Mapping) or set(block) != {"efficiency"} or not isinstance(block["efficiency"], Mapping):
            raise InputError("must be a mapping with exactly one key, efficiency: {parameter: value}",
                             source=source, field=where)
        raw = dict(block["efficiency"])
        bad = sorted(set(raw) - set(EFFICIENCY_FIELDS))
        if bad:
            raise InputError(f"unknown efficiency parameter(s) {', '.join(bad)}; parameters: {', '.join(EFFICIENCY_FIELDS)}",
                             source=source, field=f"{where}.efficiency.{bad[0]}")
        try:
            efficiency_from_mapping(raw, source=source)  # numbers and bounds
        except InputError as exc:
            raise InputError(str(exc).split(": ", 1)[-1], source=source,
                             field=f"{where}.{exc.field}" if exc.field else f"{where}.efficiency") from None
        efficiency[str(name)] = {k: float(v) for k, v in raw.items()}
    about = data.get("about") or {}
    if not isinstance(about, Mapping):
        raise InputError("must be a mapping (free-form notes on the fit)", source=source, field="about")
    return Calibration(efficiency=efficiency, source=source, about=dict(about))


class _OverlayLoader(yaml.SafeLoader):
    """PyYAML's safe loader, reading ``6e-1`` and ``1e308`` as numbers.

    PyYAML follows YAML 1.1, whose floats need a dot and a signed exponent, so the exponent forms a fit
    or a person writes (``6e-1``, ``1e308``, ``5.5e3``) would be strings and refused as "not a number".
    A quoted ``'6e-1'`` stays a string; ``1e999`` reads as infinity, which the bounds refuse.
    """


_OverlayLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^[-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9][0-9_]*)[eE][-+]?[0-9]+$"),
    list("-+0123456789."),
)


def _duplicate_key(node: yaml.Node, path: tuple[str, ...] = (), seen_nodes: set | None = None) -> tuple[str, int] | None:
    """``(dotted key, line)`` of the first key a YAML mapping holds twice, else None.

    A YAML mapping keeps the last of two equal keys, so a second ``vllm:`` under ``engines:`` would drop the
    first block without a word. Nodes are visited once (aliases share them), so anchors cannot loop or blow up.
    """
    seen_nodes = set() if seen_nodes is None else seen_nodes
    if id(node) in seen_nodes:
        return None
    seen_nodes.add(id(node))
    if isinstance(node, yaml.MappingNode):
        keys: set[str] = set()
        for key_node, value_node in node.value:
            name = key_node.value if isinstance(key_node, yaml.ScalarNode) else None
            if name is not None and key_node.tag != "tag:yaml.org,2002:merge":  # `<<:` merges may repeat
                if name in keys:
                    return ".".join((*path, name)), key_node.start_mark.line + 1
                keys.add(name)
            found = _duplicate_key(value_node, (*path, name) if name is not None else path, seen_nodes)
            if found:
                return found
    elif isinstance(node, yaml.SequenceNode):
        for i, item in enumerate(node.value):
            found = _duplicate_key(item, (*path, str(i)), seen_nodes)
            if found:
                return found
    return None


def _no_duplicate_pairs(pairs: list[tuple[str, Any]]) -> dict:
    keys = [k for k, _ in pairs]
    twice = next((k for i, k in enumerate(keys) if k in keys[:i]), None)
    if twice is not None:
        raise InputError(f"holds the key {twice!r} twice in one object, and JSON keeps only the last; keep one",
                         field=twice)
    return dict(pairs)


def read_overlay(path: Path) -> dict[str, Any]:
    """A calibration overlay file (training or serving) as a mapping: YAML or JSON, read by
    :func:`loading.read_mapping` (its errors name the file), then read again refusing duplicate keys and
    taking exponent numbers (``6e-1``) as numbers."""
    data = loading.read_mapping(path)  # missing, unreadable, malformed, empty, not a mapping: worded there
    source = str(path)
    text = path.read_text()
    if path.suffix == ".json":
        try:
            json.loads(text, object_pairs_hook=_no_duplicate_pairs)
        except InputError as exc:
            raise InputError(exc.message, source=source, field=exc.field) from None
        return data
    loader = _OverlayLoader(text)
    try:
        node = loader.get_single_node()
        found = _duplicate_key(node)
        if found:
            key, line = found
            raise InputError(f"holds the key {key.rsplit('.', 1)[-1]!r} twice (line {line}), and YAML keeps only "
                             "the last; keep one", source=source, field=key)
        data = loader.construct_document(node)
    except (yaml.YAMLError, ValueError, RecursionError) as exc:
        if isinstance(exc, InputError):
            raise
        raise InputError(f"cannot be read ({exc}); write plain numbers and mappings", source=source) from None
    finally:
        loader.dispose()
    return data


def load_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration overlay YAML (errors name the file and the field)."""
    path = Path(path)
    return calibration_from_mapping(read_overlay(path), source=str(path))


def apply_calibration(hardware: Hardware, calibration: Calibration | Mapping[str, Any] | None) -> Hardware:
    """``hardware`` with the overlay's efficiency values for its profile (unchanged if the overlay omits it)."""
    if calibration is None:
        return hardware
    if not isinstance(calibration, Calibration):
        calibration = calibration_from_mapping(calibration, source="<in memory>")
    raw = calibration.efficiency.get(hardware.name)
    if not raw:
        return hardware
    efficiency = efficiency_from_mapping(dict(raw), source=calibration.source, base=hardware.efficiency)
    return dataclasses.replace(hardware, efficiency=efficiency)
