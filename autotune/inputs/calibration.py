"""A calibration overlay: fitted efficiency values laid over bundled hardware profiles.

``autotune calibrate`` writes it (:mod:`autotune.training.calibration` fits it); ``--calibration
FILE`` reads it back here, at the edge, checking every profile name, key and bound::

    hardware:
      h100-sxm5-80gb:
        efficiency: {gemm: 0.57, attention: 0.21, ...}
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterable, Mapping

from ..errors import InputError, with_guess
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
    if data.get("schema") == "serving":
        raise InputError("must be a training calibration (hardware: PROFILE: efficiency: ...), but got (schema=serving): "
                         "a serving overlay goes with serving commands (--workload serve) and serving CSVs; fit a "
                         "training one with `autotune calibrate TRAINING_RUNS.csv --out FILE`", source=source,
                         field="schema")
    unknown = sorted(set(data) - {"hardware", "about"})
    if unknown:
        raise InputError(f"unknown key(s) {', '.join(with_guess(k, {'about', 'hardware'}) for k in unknown)}; allowed: "
                         "about, hardware", source=source, field=unknown[0])
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
            raise InputError(f"unknown efficiency parameter(s) {', '.join(with_guess(k, set(EFFICIENCY_FIELDS)) for k in bad)}; "
                             f"parameters: {', '.join(EFFICIENCY_FIELDS)}",
                             source=source, field=f"{where}.efficiency.{bad[0]}")
        try:
            efficiency_from_mapping(raw, source=source)  # numbers and bounds
        except InputError as exc:
            raise InputError(exc.message, source=source,  # the message alone: the field is named once, in full
                             field=f"{where}.{exc.field}" if exc.field else f"{where}.efficiency") from None
        efficiency[str(name)] = {k: float(v) for k, v in raw.items()}
    about = data.get("about") or {}
    if not isinstance(about, Mapping):
        raise InputError("must be a mapping (free-form notes on the fit)", source=source, field="about")
    return Calibration(efficiency=efficiency, source=source, about=dict(about))


def load_calibration(path: str | Path) -> Calibration:
    """Read and check a calibration overlay YAML (errors name the file and the field)."""
    if not str(path).strip():  # as a path '' is the working folder
        raise InputError("must not be empty: give the YAML file `autotune calibrate` wrote", field="--calibration")
    path = Path(path)
    return calibration_from_mapping(loading.read_mapping(path), source=str(path))


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


def calibrated_hardware(hardware: Hardware, path: str | Path) -> Hardware:
    """``hardware`` with the values of the overlay at ``path`` (``--calibration``) for its profile.  An overlay
    without that profile is refused: a user who gives one expects it to act, and a fit of other GPUs would be
    silently ignored (as a serving overlay without the engine's parameters is refused)."""
    calibration = load_calibration(path)
    if hardware.name not in calibration.efficiency:
        raise InputError(f"has no values for hardware {hardware.name!r} (it calibrates "
                         f"{', '.join(sorted(calibration.efficiency))}); calibrate on runs of {hardware.name} or drop "
                         "--calibration", source=str(path), field="--calibration")
    return apply_calibration(hardware, calibration)
