"""Capacity planning: how many GPUs, of which kind, to train a token budget by a deadline, and at what cost.

``autotune search --gpus 64..4096 --hardware h100-sxm5-80gb,a100-sxm4-80gb --tokens 2e12 --deadline 30d``
searches every (hardware profile, GPU count) pair with the ordinary search and
compares their best plans on total days, GPU-hours, money, energy and emissions.

Energy and emissions (docs/reports.md):

* energy = GPUs x average board power (the profile's ``average_power_w``) x hours x PUE
* emissions = energy x grid carbon intensity

The defaults below carry their public sources (Uptime Institute for PUE, IEA via carbontracker for grid intensity).
The parsers here turn command-line text into numbers and raise
:class:`~autotune.errors.InputError` naming the flag and a fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..errors import InputError, comma_items

if TYPE_CHECKING:
    from ..inputs.hardware import Cluster
    from .result import RankedPlan

# PUE: the Uptime Institute's industry-average PUE for 2023 (1.58; flat at 1.55-1.59 since about 2020),
# journal.uptimeinstitute.com "Large data centers are mostly more efficient, analysis confirms" (2024-02-07).
# Chosen over a hyperscaler's ~1.1 (Google fleet 1.10, CNBC 2022-04-13) because autotune does not know where
# the run will happen: the industry average does not understate energy for an unknown facility, and people on
# a hyperscale cloud pass --pue 1.1.
DEFAULT_PUE = 1.58
PUE_SOURCE = ("Uptime Institute industry average 2023 (journal.uptimeinstitute.com, 2024-02-07); "
              "hyperscale clouds run near 1.1 (Google fleet 1.10): pass --pue 1.1")
# Grid intensity: the world-average 475 gCO2e/kWh (IEA, 2019), the default of carbontracker
# (lfwa/carbontracker, carbontracker/constants.py). The location is unknown, so the world average;
# regional values range from ~20-57 (Quebec, France) to 920 (India); pass --grid-intensity.
DEFAULT_GRID_INTENSITY = 475.0
GRID_INTENSITY_SOURCE = ("world average 2019 (IEA), carbontracker's default (lfwa/carbontracker constants.py); "
                         "e.g. France 57, US-East 368, Germany 615: pass --grid-intensity")

_DURATION = re.compile(r"^\s*([0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:e([0-9]+))?\s*([a-z]*)\s*$", re.IGNORECASE)
_UNITS_DAYS = {"d": 1.0, "day": 1.0, "days": 1.0, "h": 1 / 24, "hr": 1 / 24, "hour": 1 / 24, "hours": 1 / 24,
               "min": 1 / 1440, "mins": 1 / 1440, "minute": 1 / 1440, "minutes": 1 / 1440,
               "w": 7.0, "wk": 7.0, "week": 7.0, "weeks": 7.0, "mo": 30.0, "month": 30.0, "months": 30.0}
# A deadline longer than this is a typo (a century).
MAX_DEADLINE_DAYS = 36_500.0


def gpu_counts(low: int, high: int, gpus_per_node: int) -> list[int]:
    """The GPU counts searched in ``low..high``: whole nodes, powers of two times the node size, plus the ends.

    Below one node, powers of two (1, 2, 4, ...) count too. The ends are rounded inwards to whole nodes.
    """
    counts = set()
    power = 1
    while power < gpus_per_node:
        if low <= power <= high:
            counts.add(power)
        power *= 2
    nodes = 1
    while nodes * gpus_per_node <= high:
        if nodes * gpus_per_node >= low:
            counts.add(nodes * gpus_per_node)
        nodes *= 2
    first = math.ceil(low / gpus_per_node) * gpus_per_node if low > gpus_per_node else low
    last = (high // gpus_per_node) * gpus_per_node if high > gpus_per_node else high
    for end in (first, last):
        if low <= end <= high and end >= 1:
            counts.add(end)
    if not counts:
        raise InputError(f"no whole-node GPU count lies in {low}..{high} with nodes of {gpus_per_node}; "
                         f"widen the range (e.g. {gpus_per_node}..{gpus_per_node * 64})", field="--gpus")
    return sorted(counts)


def parse_duration_days(text: str | None, flag: str = "--deadline") -> float | None:
    """``"30d"``, ``"720h"``, ``"6w"``, ``"2mo"`` (30 days) or ``"90min"`` -> days.  A bare number is refused: 30 of
    what (days? hours? seconds, as a timeout would be?) is a guess autotune does not make."""
    if text is None:
        return None
    match = _DURATION.match(str(text))
    unit = match.group(3).lower() if match else ""
    if unit == "m":
        raise InputError(f"'m' is ambiguous in {text!r}: write mo for months (30 days) or min for minutes", field=flag)
    if match and not unit:
        number = match.group(0).strip()
        example = f"{number}d" if float(match.group(1)) > 0 else "30d"  # 0d would be refused next
        raise InputError(f"must name its unit, but got {text!r}: write e.g. {example} for days (or h, w, mo, min)",
                         field=flag)
    if not match or unit not in _UNITS_DAYS:
        raise InputError(f"must be a duration such as 30d, 720h, 6w or 2mo, but got {text!r}", field=flag)
    exponent = int(match.group(2)) if match.group(2) else 0
    days = float(match.group(1)) * _UNITS_DAYS[unit] * (10.0 ** exponent if exponent < 300 else math.inf)
    if days <= 0:
        raise InputError(f"must be longer than zero, but got {text!r}", field=flag)
    if not days <= MAX_DEADLINE_DAYS:
        raise InputError(f"must be at most {MAX_DEADLINE_DAYS:,.0f} days, but got {text!r}", field=flag)
    return days


def split_hardware(text: str) -> list[str]:
    names = comma_items(text, what="--hardware", field="--hardware")
    if not names:
        raise InputError("name at least one hardware profile (see `autotune hardware list`)", field="--hardware")
    if len(set(names)) != len(names):
        raise InputError(f"each profile may appear once, but got {text!r}", field="--hardware")
    return names


def check_pue(pue: float | None) -> float:
    value = DEFAULT_PUE if pue is None else pue
    if not 1.0 <= value <= 3.0:
        raise InputError(f"must be between 1.0 and 3.0 (power usage effectiveness), but got {value}; "
                         f"e.g. 1.1 for a hyperscale cloud, {DEFAULT_PUE} industry average", field="--pue")
    return value


# The least positive grid intensity, gCO2e/kWh: the cleanest grids (hydro, nuclear) emit some 10 g over their life
# cycle, so a value below 1 is one given in kilograms (0.475 for 475 g), which printed emissions 1,000 times too low.
MIN_GRID_INTENSITY = 1.0


def check_grid_intensity(intensity: float | None) -> float:
    value = DEFAULT_GRID_INTENSITY if intensity is None else intensity
    if not 0.0 <= value <= 2000.0:
        raise InputError(f"must be between 0 and 2000 gCO2e/kWh, but got {value}; e.g. 57 France, 475 world average",
                         field="--grid-intensity")
    if 0.0 < value < MIN_GRID_INTENSITY:
        raise InputError(f"--grid-intensity = 0 or --grid-intensity >= {MIN_GRID_INTENSITY:g} gCO2e/kWh must hold (the "
                         f"cleanest grids emit some 10 g), but got (--grid-intensity={value:g}); give grams per kWh, not "
                         "kilograms (0.475 kg is 475 g), or 0 for power that emits none", field="--grid-intensity")
    return value + 0.0  # --grid-intensity -0 is 0: it had printed "-0 t CO2e"


def footprint(n_gpus: int, training_days: float, average_power_w: float, price_usd_per_gpu_hour: float,
              pue: float, grid_g_per_kwh: float) -> dict[str, float]:
    """GPU-hours, money, energy (MWh at the facility) and emissions (t CO2e) of one run."""
    hours = training_days * 24.0
    gpu_hours = n_gpus * hours
    energy_mwh = gpu_hours * average_power_w * pue / 1e6
    return {
        "gpu_hours": gpu_hours,
        "cost_usd": gpu_hours * price_usd_per_gpu_hour,
        "energy_mwh": energy_mwh,
        "co2e_t": energy_mwh * grid_g_per_kwh / 1000.0,  # MWh x g/kWh = kg; / 1000 = t
    }


@dataclass(frozen=True)
class Candidate:
    """The best plan of one (hardware, GPU count) pair, with its totals; ``plan`` is None when nothing fits."""

    hardware: str
    gpus: int
    gpus_per_node: int
    plan: dict[str, Any] | None
    estimate: dict[str, Any] | None
    totals: dict[str, float] = field(default_factory=dict)  # training_days, gpu_hours, cost_usd, energy_mwh, co2e_t
    meets_deadline: bool = False
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"hardware": self.hardware, "gpus": self.gpus, "nodes": max(1, self.gpus // self.gpus_per_node),
                "plan": self.plan, "estimate": self.estimate, **self.totals, "meets_deadline": self.meets_deadline,
                **({"note": self.note} if self.note else {})}


@dataclass(frozen=True)
class CapacityResult:
    candidates: list[Candidate]
    deadline_days: float | None
    objective: str
    pue: float
    grid_g_per_kwh: float
    chosen: Candidate | None  # what --objective asks for among plans meeting the deadline
    cheapest: Candidate | None  # cheapest meeting the deadline
    fastest: Candidate | None  # fastest overall
    pue_source: str = PUE_SOURCE  # where the PUE came from: the default's source, or the flag
    grid_source: str = GRID_INTENSITY_SOURCE

    def to_json(self) -> dict[str, Any]:
        def one(c: Candidate | None) -> dict[str, Any] | None:
            return c.to_json() if c else None

        return {
            "deadline_days": self.deadline_days, "objective": self.objective,
            "pue": self.pue, "pue_source": self.pue_source,
            "grid_intensity_g_per_kwh": self.grid_g_per_kwh, "grid_intensity_source": self.grid_source,
            "chosen": one(self.chosen), "cheapest": one(self.cheapest), "fastest": one(self.fastest),
            "candidates": [c.to_json() for c in self.candidates],
        }


def choose(candidates: Sequence[Candidate], objective: str, deadline_days: float | None,
           pue: float, grid: float, *, pue_source: str = PUE_SOURCE,
           grid_source: str = GRID_INTENSITY_SOURCE) -> CapacityResult:
    """Pick the cheapest plan that meets the deadline, the fastest overall, and the one ``objective`` asks for."""
    fitting = [c for c in candidates if c.plan is not None]
    in_time = [c for c in fitting if c.meets_deadline]

    def by(key: str, pool: Sequence[Candidate]) -> Candidate | None:
        # Ties (e.g. equal cost) go to fewer GPUs, then to the profile listed first.
        return min(pool, key=lambda c: (c.totals[key], c.gpus)) if pool else None

    cheapest = by("cost_usd", in_time)
    fastest = by("training_days", fitting)
    if objective == "cost":
        chosen = cheapest
    elif objective in ("time", "throughput"):
        chosen = by("training_days", in_time)
    elif objective == "memory":
        chosen = min(in_time, key=lambda c: (c.estimate["memory_gib_per_gpu"], c.gpus)) if in_time else None
    else:
        raise InputError(f"capacity planning ranks by one of cost, time, throughput, memory, but got {objective!r}",
                         field="--objective")
    return CapacityResult(list(candidates), deadline_days, objective, pue, grid, chosen, cheapest, fastest,
                          pue_source, grid_source)


@dataclass(frozen=True)
class CapacityGoal:
    """What the pairs are compared for: the token budget, the objective to rank by, the deadline, PUE and grid."""

    tokens: float
    objective: str
    deadline_days: float | None
    pue: float
    grid: float
    pue_source: str = PUE_SOURCE  # "given with --pue" when the user gave it
    grid_source: str = GRID_INTENSITY_SOURCE


def make_candidate(hardware: str, cluster: Cluster, best: RankedPlan | None, goal: CapacityGoal,
                   note: str = "") -> Candidate:
    """The candidate of one pair: ``cluster`` its ``Cluster``, ``best`` its best ranked plan (None when none fits)."""
    gpus, gpus_per_node = cluster.n_gpus, cluster.gpus_per_node
    if best is None:
        return Candidate(hardware, gpus, gpus_per_node, None, None, {}, False, note or "no plan fits")
    hw = cluster.hardware
    days = goal.tokens / (best.estimate["tokens_per_s_per_gpu"] * gpus) / 86400.0
    totals = {"training_days": days,
              **footprint(gpus, days, hw.average_power_w, hw.price_usd_per_gpu_hour, goal.pue, goal.grid)}
    meets = goal.deadline_days is None or days <= goal.deadline_days
    return Candidate(hardware, gpus, gpus_per_node, best.plan.as_dict(), best.estimate, totals, meets, note)


def plan_capacity(
    hardware_names: Sequence[str],
    gpu_range: tuple[int, int] | None,
    fixed_gpus: int | None,
    goal: CapacityGoal,
    *,
    node_size: Callable[[str], int],
    build: Callable[[str, int], Any],
    search_one: Callable[[Any], Any],
    progress: Callable[[str, int, int], None] | None = None,
    why_none: Callable[[Any, Any], str] | None = None,
) -> tuple[CapacityResult, dict[tuple[str, int], Any]]:
    """Search every (hardware, GPU count) pair and compare their best plans.

    ``node_size(hardware)`` is that profile's GPUs per node (or --gpus-per-node);
    ``build(hardware, gpus)`` returns the search inputs (with ``.cluster``) for one pair, or raises
    InputError when that pair is impossible (e.g. the count does not fill whole nodes);
    ``search_one(inputs)`` returns a ``SearchResult``; ``why_none(inputs, result)`` says why a pair has no plan when
    it is not memory (a precision the GPU has no tensor cores for, a layout rule every plan breaks). Returns the
    comparison and every pair's result.
    """
    pairs: list[tuple[str, int]] = []
    for name in hardware_names:
        counts = gpu_counts(gpu_range[0], gpu_range[1], node_size(name)) if gpu_range is not None else [fixed_gpus]
        pairs.extend((name, n) for n in counts)
    candidates: list[Candidate] = []
    results: dict[tuple[str, int], Any] = {}
    for done, (name, n) in enumerate(pairs):
        if progress:
            progress(f"{name} x {n}", done, len(pairs))
        inputs = build(name, n)
        result = search_one(inputs)
        results[(name, n)] = (inputs, result)
        best = result.ranked[0] if result.ranked else None
        note = (why_none(inputs, result) if why_none else "") if best is None else ""
        candidates.append(make_candidate(name, inputs.cluster, best, goal, note))
    if progress:
        progress("done", len(pairs), len(pairs))
    return choose(candidates, goal.objective, goal.deadline_days, goal.pue, goal.grid, pue_source=goal.pue_source,
                  grid_source=goal.grid_source), results


__all__ = [
    "DEFAULT_GRID_INTENSITY",
    "DEFAULT_PUE",
    "GRID_INTENSITY_SOURCE",
    "PUE_SOURCE",
    "Candidate",
    "CapacityGoal",
    "CapacityResult",
    "check_grid_intensity",
    "check_pue",
    "choose",
    "footprint",
    "gpu_counts",
    "make_candidate",
    "parse_duration_days",
    "plan_capacity",
    "split_hardware",
]
