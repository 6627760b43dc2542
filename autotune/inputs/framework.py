"""Training software profiles (the *software* input of the cost model): ``NAME[@VERSION]``.

Real runs differ by the software that ran them as much as by their layout: the attention
kernel, what ``selective`` recompute keeps, how ZeRO shards and communicates, which pipeline
schedules exist and what they demand, which communication is overlapped and on which link,
the fp8 recipe, and the framework's own memory.  A profile states these *traits*, each with
its source, for one framework; behaviour that changed between releases is a ``changes``
entry that applies from its date on.

A profile is a YAML file in ``profiles/frameworks/``::

    name: megatron-lm
    description: ...
    first_release: {date: 2019-08, source: "..."}  # optional: a version before it is refused
    releases: {core_r0.7.0: 2024-06}     # release name -> YYYY-MM, so NAME@RELEASE resolves to a date
    traits: {attention: unfused, ...}    # as of the earliest version the profile covers
    sources: {attention: "...", ...}     # one source per trait
    changes:
      - since: 2023-01
        traits: {attention: flash}
        source: "..."

A trait added after profiles were written may be left out (``_OPTIONAL``: ``fp8_weight_cache_bytes``,
``fp8_param_gather``, ``zero3_with_ep``, ``zero3_with_moe``, ``moe_tp_needs_sp``, ``fp16_grads_in_fp16``,
``fp4_recipe``);
it then takes its documented default with that default's source.

``load_framework("megatron-lm@2021-04")`` returns a frozen :class:`Framework` with every
trait resolved for that version; without ``@VERSION`` it is the newest behaviour the profile
knows.  A version is a release named in the profile or a date ``YYYY-MM`` (the date of the
run, as ``training_runs.csv`` gives it).  Unknown keys, a missing source or a value out of
range are an :class:`~autotune.errors.InputError` naming the file and the field.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, fields, replace
from types import MappingProxyType
from typing import Any, Mapping

import numpy as np

from ..errors import InputError, check_keys
from . import loading
from .resources import bundled_names, read_named

# The framework `search`, `predict`, `explain` and `validate` use when none is named
# (`--framework`, or an empty `framework` cell): Megatron-LM at its newest profiled behaviour,
# the software whose rank order and semantics the cost model follows (docs/cost-model.md).
DEFAULT_FRAMEWORK = "megatron-lm"

ATTENTION = ("unfused", "flash", "cudnn")
SELECTIVE = ("core_attention", "op_sac", "none")
ZERO2 = ("accumulate_unsharded", "reduce_per_microbatch", "fsdp2_sync_unless_pp")
ZERO3_COLLECTIVES = ("block", "submodule")
MASTER_WEIGHTS = ("separate", "sharded_param")
PIPELINE_RUNTIMES = ("megatron", "torch")
SCHEDULES = ("1f1b", "interleaved", "dualpipe")
PARALLEL_DIMS = ("tp", "sp", "pp", "cp", "ep")
MICROBATCH_DEFAULTS = ("unknown", "stages")
FP8_RECIPES = ("none", "delayed", "tensorwise", "blockwise", "mxfp8")
# fp4 training recipes: none, or NVFP4 block scaling (TransformerEngine NVFP4BlockScaling; Megatron --fp4-format e2m1
# --fp4-recipe nvfp4)
FP4_RECIPES = ("none", "nvfp4")
EXPERT_TP = ("equal_tp", "independent", "none")
EP_DISPATCH = ("alltoall", "dedup")
GROUPED_GEMM = ("per_expert", "single_kernel")

_DATE = re.compile(r"^(\d{4})-(\d{2})$")


@dataclass(frozen=True)
class Framework:
    """One framework at one version: every trait the cost model reads (see ``profiles/frameworks``).

    Overlap traits come in two kinds.  TP and EP overlap (``*_nvlink`` inside the NVLink domain,
    ``*_network`` for a group that crosses nodes) are the share of a collective the framework's
    chunked overlap hides (TE userbuffers, async TP, batch-level EP overlap), never more than the
    compute beside it.  DP, ZeRO-3 and CP overlap are the share of the compute window a collective
    on its own stream can hide behind (bucketed reduction, prefetch, ring attention); the rest of
    the collective is exposed.  ``step_time.exposed`` and ``exposed_behind`` apply them.
    """

    name: str
    version: str  # as asked ("" = newest)
    date: str  # YYYY-MM the version resolves to ("" = newest)
    description: str
    # -- kernels --
    attention: str  # unfused (scores through HBM) | flash (FlashAttention-2 / SDPA) | cudnn (TransformerEngine fused)
    dropout: bool  # the framework's default dropout, for a model that does not state its own
    parallel_dims: tuple[str, ...]  # model-parallel dimensions offered: tp, sp (sequence parallel), pp, cp (ring), ep
    # -- recompute --
    selective_recompute: str  # core_attention (Megatron) | op_sac (PyTorch op-level SAC) | none (not offered)
    # -- ZeRO / data parallel --
    zero_stages: tuple[int, ...]  # ZeRO stages offered (0 = DDP)
    zero_stages_with_pp: tuple[int, ...]  # of those, the ones usable with pipeline parallelism
    zero3_with_ep: bool  # whether ZeRO-3 runs with expert parallelism (DeepSpeed's MoE refuses it)
    zero3_with_moe: bool  # whether ZeRO-3 runs with a mixture of experts at any ep (Megatron-DeepSpeed's MoE layers refuse it)
    # whether a mixture of experts trains with tp > 1 only under sequence parallelism (Megatron-Core's
    # MoELayer.forward raises ValueError in training when the attention TP group has more than one rank and
    # sequence_parallel is off)
    moe_tp_needs_sp: bool
    # accumulate_unsharded (FSDP with gradient sync off: unsharded fp32 accumulation, one reduce-scatter a step)
    # | reduce_per_microbatch (DeepSpeed ZeRO-2: each micro-batch reduced into the shard, weights kept whole)
    # | fsdp2_sync_unless_pp (FSDP2 as torchtitan drives it: without PP every micro-batch reduce-scatters and
    # reshards, so the next gathers again; under torch.distributed.pipelining as accumulate_unsharded)
    zero2: str
    zero3_collectives: str  # block (one gather per transformer block) | submodule (one per linear/norm)
    master_weights: str  # separate (bf16 weights + fp32 master) | sharded_param (FSDP: the fp32 shard is the master)
    grad_bytes: float  # bytes per parameter of the gradient buffer (bf16 and fp8 plans; fp16: fp16_grads_in_fp16)
    # fp16 plans keep and reduce 2-byte gradients whatever grad_bytes says: Megatron's arguments.py turns
    # accumulate_allreduce_grads_in_fp32 on for --bf16 only, so under --fp16 the grad buffer is fp16
    fp16_grads_in_fp16: bool
    # -- pipeline --
    pipeline_runtime: str  # megatron (frees each micro-batch's output) | torch (torch.distributed.pipelining)
    pipeline_schedules: tuple[str, ...]
    interleave_microbatches_multiple_of_pp: bool
    interleave_min_pp: int
    uneven_stages: bool  # layers need not divide by pp*vp
    default_microbatches: str  # unknown | stages (pp*vp) when the micro-batch size is not given
    # -- overlap (fractions hidden) --
    tp_overlap_nvlink: float
    tp_overlap_network: float
    tp_overlap_needs_sp: bool
    cp_overlap: float  # share of the attention compute the ring's K/V exchange can hide behind
    ep_overlap_nvlink: float
    ep_overlap_network: float
    # Megatron-Core's batch-level EP overlap (--overlap-moe-expert-parallel-comm) needs the interleaved
    # schedule when pp > 1 and no full recompute (TransformerConfig.__post_init__); elsewhere it does nothing.
    ep_overlap_needs_interleaving: bool
    dp_overlap: float  # share of the last micro-batch's backward (forward, for the gather) the ZeRO 0-2 reduction hides behind
    zero3_overlap: float  # share of each micro-batch's compute ZeRO-3 / FSDP gathers and reduce-scatters hide behind
    pp_overlap: float
    # -- experts --
    expert_tp: str  # equal_tp (experts split like attention) | independent (MoE parallel folding) | none (never split)
    ep_dispatch: str  # alltoall (one message per routed copy) | dedup (one per NVLink domain, forwarded inside; DeepEP-style)
    fp8_dispatch: bool  # fp8 plans send the dispatch all-to-all in fp8 (the combine stays bf16)
    grouped_gemm: str  # per_expert (one GEMM launch per local expert) | single_kernel (one grouped kernel)
    moe_token_dropping: bool  # offers an expert capacity with dropping and padding (--moe-capacity-factor)
    optimizer_offload: bool  # offers the optimizer step on the host with its state in host memory (offload=cpu)
    # -- host (CPU) issue rate: a MoE block is never faster than the host can issue its ops --
    host_op_us: float  # host microseconds to issue one op (Python, dispatcher, launch) on an x86 server host
    moe_host_ops: float  # ops the host issues per MoE block and micro-batch, forward + backward, besides the experts'
    moe_host_ops_per_expert: float  # ops issued per local expert and micro-batch, forward + backward
    # -- fp8 --
    fp8_recipe: str  # none = no fp8 training
    fp8_cast_bytes: float  # HBM bytes per element cast to fp8 (read bf16, write fp8 and its transpose)
    # Bytes per local GEMM weight that fp8 plans keep beyond the 16-bit weights, from step to step:
    # TransformerEngine's cached row-wise fp8 copy and its column-wise/transposed one (1 + 1) next to bf16
    # parameters (Megatron-LM's default); 0 where the framework casts anew every GEMM and keeps nothing
    # (torchao Float8Linear) or holds the parameters in fp8, the copies replacing the bf16 weights
    # (fp8_param_gather recipes of NeMo and Megatron-Bridge).
    fp8_weight_cache_bytes: float
    # Parameters held in fp8 themselves under the distributed optimizer (Megatron --fp8-param-gather): the cached fp8
    # copies then take the bf16 weights' place, so fp8_weight_cache_bytes applies at ZeRO-0 only.
    fp8_param_gather: bool
    # -- fp4 --
    fp4_recipe: str  # none = no fp4 training; nvfp4 = the linear layers' GEMMs in NVFP4 (FP4 tensor cores)
    # -- memory --
    logits_bytes: float  # bytes per logit element at the loss's peak
    workspace_gib: float  # CUDA context, library workspaces, communication buffers
    allocator_overhead: float  # caching-allocator overhead on memory allocated during the step
    sources: Mapping[str, str] = field(default_factory=dict, compare=False)
    changes_applied: tuple[str, ...] = ()  # the `since` dates of the changes this version includes

    @property
    def label(self) -> str:
        """``name@version`` as asked, or ``name (newest)``."""
        return f"{self.name}@{self.version}" if self.version else f"{self.name} (newest profiled)"

    def supports_fp8(self) -> bool:
        return self.fp8_recipe != "none"

    def supports_fp4(self) -> bool:
        return self.fp4_recipe != "none"

    def grad_bytes_of(self, fp16: Any) -> Any:
        """Bytes per parameter of the gradient buffer, and of the gradient reduction, for plans whose ``fp16`` is
        true (a bool or a numpy bool array): 2 where the framework keeps fp16 gradients in fp16
        (``fp16_grads_in_fp16``), ``grad_bytes`` otherwise."""
        if not self.fp16_grads_in_fp16:
            return self.grad_bytes
        return np.where(np.asarray(fp16, dtype=bool), 2.0, self.grad_bytes)

    def with_traits(self, **changes: Any) -> "Framework":
        return replace(self, **changes)


_META = ("name", "version", "date", "description", "sources", "changes_applied")
TRAITS: tuple[str, ...] = tuple(f.name for f in fields(Framework) if f.name not in _META)

# Kind of every trait: a tuple of choices, "bool", "fraction" (0..1), ("number", low, high),
# ("subset", choices), ("bytes", {size: what}) (a number of bytes, one of those sizes) or "int".
_KINDS: Mapping[str, Any] = MappingProxyType({
    "attention": ATTENTION,
    "dropout": "bool",
    "parallel_dims": ("subset", PARALLEL_DIMS),
    "selective_recompute": SELECTIVE,
    "zero_stages": ("subset", (0, 1, 2, 3)),
    "zero_stages_with_pp": ("subset", (0, 1, 2, 3)),
    "zero3_with_ep": "bool",
    "zero3_with_moe": "bool",
    "moe_tp_needs_sp": "bool",
    "fp16_grads_in_fp16": "bool",
    "zero2": ZERO2,
    "zero3_collectives": ZERO3_COLLECTIVES,
    "master_weights": MASTER_WEIGHTS,
    "grad_bytes": ("bytes", {2: "bf16 gradients", 4: "fp32"}),
    "pipeline_runtime": PIPELINE_RUNTIMES,
    "pipeline_schedules": ("subset", SCHEDULES),
    "interleave_microbatches_multiple_of_pp": "bool",
    "interleave_min_pp": "int",
    "uneven_stages": "bool",
    "default_microbatches": MICROBATCH_DEFAULTS,
    "tp_overlap_nvlink": "fraction",
    "tp_overlap_network": "fraction",
    "tp_overlap_needs_sp": "bool",
    "cp_overlap": "fraction",
    "ep_overlap_nvlink": "fraction",
    "ep_overlap_network": "fraction",
    "ep_overlap_needs_interleaving": "bool",
    "expert_tp": EXPERT_TP,
    "ep_dispatch": EP_DISPATCH,
    "fp8_dispatch": "bool",
    "grouped_gemm": GROUPED_GEMM,
    "moe_token_dropping": "bool",
    "optimizer_offload": "bool",
    "host_op_us": ("number", 0.0, 1000.0),
    "moe_host_ops": ("number", 0.0, 10000.0),
    "moe_host_ops_per_expert": ("number", 0.0, 1000.0),
    "dp_overlap": "fraction",
    "zero3_overlap": "fraction",
    "pp_overlap": "fraction",
    "fp8_recipe": FP8_RECIPES,
    "fp8_cast_bytes": ("number", 0.0, 16.0),
    "fp8_weight_cache_bytes": ("number", 0.0, 8.0),
    "fp8_param_gather": "bool",
    "fp4_recipe": FP4_RECIPES,
    "logits_bytes": ("number", 0.0, 32.0),
    "workspace_gib": ("number", 0.0, 32.0),
    "allocator_overhead": ("number", 0.0, 1.0),
})

# Traits added after the profiles were written, with the value a profile that omits them gets and the
# source that value cites: a profile written before a trait existed keeps loading, and says nothing it
# did not say.  Every bundled profile that needs another value states it.
_OPTIONAL: Mapping[str, tuple[Any, str]] = MappingProxyType({
    "fp8_weight_cache_bytes": (0.0, "default for a profile that does not state it: no fp8 weight copies kept between "
                                    "GEMMs (right for a framework without fp8 training, fp8_recipe none)"),
    "fp8_param_gather": (False, "default for a profile that does not state it: parameters in the training precision "
                              "(bf16), never fp8"),
    "zero3_with_ep": (True, "default for a profile that does not state it: ZeRO-3 composes with expert parallelism "
                           "(as FSDP does with Megatron-Core's and torchtitan's MoE)"),
    "zero3_with_moe": (True, "default for a profile that does not state it: a mixture of experts at ep 1 trains under "
                            "ZeRO-3 like a dense model"),
    "moe_tp_needs_sp": (False, "default for a profile that does not state it: a mixture of experts trains with tensor "
                               "parallelism with or without sequence parallelism"),
    "fp4_recipe": ("none", "default for a profile that does not state it: no fp4 training"),
    "fp16_grads_in_fp16": (False, "default for a profile that does not state it: gradients in grad_bytes for every "
                                  "precision, fp16 included"),
})

_TOP_KEYS = frozenset({"name", "description", "first_release", "releases", "traits", "sources", "changes"})
_FIRST_RELEASE_KEYS = frozenset({"date", "source"})
_CHANGE_KEYS = frozenset({"since", "traits", "source"})


def _trait(value: Any, name: str, *, source: str, where: str) -> Any:
    kind = _KINDS[name]
    if kind == "bool":
        if not isinstance(value, bool):
            raise InputError(f"must be true or false, but got {value!r}", source=source, field=where)
        return value
    if kind == "int":
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise InputError(f"must be an integer >= 1, but got {value!r}", source=source, field=where)
        return value
    if kind == "fraction" or (isinstance(kind, tuple) and kind and kind[0] == "number"):
        low, high = (0.0, 1.0) if kind == "fraction" else kind[1:]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not low <= value <= high:
            raise InputError(f"must be a number with {low:g} <= value <= {high:g}, but got {value!r}",
                             source=source, field=where)
        return float(value)
    if isinstance(kind, tuple) and kind and kind[0] == "bytes":  # a dtype's size: 3 bytes is no gradient type
        sizes = kind[1]
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value not in sizes:
            listed = " or ".join(f"{size} ({what})" for size, what in sizes.items())
            raise InputError(f"must be {listed} bytes per value, but got {value!r}", source=source, field=where)
        return float(value)
    if isinstance(kind, tuple) and kind and kind[0] == "subset":
        choices = kind[1]
        if not isinstance(value, list) or any(v not in choices for v in value) or len(set(value)) != len(value):
            raise InputError(f"must be a list of distinct values from {list(choices)}, but got {value!r}",
                             source=source, field=where)
        if name == "zero_stages" and not value:  # a framework that offers no way at all to train data-parallel
            raise InputError("must list at least one ZeRO stage (0 = plain data parallelism), but got []",
                             source=source, field=where)
        return tuple(sorted(value, key=list(choices).index))
    if value not in kind:
        raise InputError(f"must be one of {', '.join(kind)}, but got {value!r}", source=source, field=where)
    return value


def _date(value: Any, *, source: str, where: str) -> str:
    text = str(value) if not isinstance(value, str) else value
    match = _DATE.match(text)
    if not match or not 1 <= int(match.group(2)) <= 12:
        raise InputError(f"must be a date YYYY-MM, but got {value!r}", source=source, field=where)
    return text


def _traits(raw: Any, *, source: str, section: str, complete: bool) -> dict[str, Any]:
    if not isinstance(raw, dict):
        raise InputError("must be a mapping of trait names to values", source=source, field=section)
    check_keys(raw, frozenset(TRAITS), source=source, section=section)
    if complete:
        missing = [t for t in TRAITS if t not in raw and t not in _OPTIONAL]
        if missing:
            raise InputError(f"must state every trait; missing {', '.join(missing)}", source=source, field=section)
    out = {k: _trait(v, k, source=source, where=f"{section}.{k}") for k, v in raw.items()}
    if complete:
        out.update({k: default for k, (default, _) in _OPTIONAL.items() if k not in out})
    return out


# A version date before this is a typo (0000-01, 1900-01): Megatron-LM, the oldest framework profiled, was
# released in August 2019 (NVIDIA's MegatronLM announcement and code, 2019-08; Shoeybi et al., arXiv:1909.08053).
# A profile that states its own ``first_release`` (with a source) is held to that date instead, and one that
# records older dates of its own (a user's) to those.
EARLIEST_FRAMEWORK_DATE = "2019-08"


@dataclass(frozen=True)
class FrameworkProfile:
    """A profile as loaded: base traits, dated changes and releases; :meth:`at` resolves a version."""

    name: str
    description: str
    base: Mapping[str, Any]
    changes: tuple[tuple[str, Mapping[str, Any], str], ...]  # (since YYYY-MM, traits, source), by date
    releases: Mapping[str, str]
    sources: Mapping[str, str]
    source: str
    first_release: tuple[str, str] | None = None  # (YYYY-MM, its source): no version of it is older

    @property
    def dates(self) -> list[str]:
        """Every date the profile records, of a change or a release."""
        return [c[0] for c in self.changes] + list(self.releases.values())

    @property
    def newest(self) -> str:
        """The newest date the profile knows, of a change or a release (``""`` when it records none)."""
        return max([c[0] for c in self.changes] + list(self.releases.values()), default="")

    def known_versions(self) -> str:
        """The versions this profile knows, in words: its releases and the dates its changes span."""
        releases = f"releases {', '.join(self.releases)}" if self.releases else "no named releases"
        dates = (f"changes profiled from {self.changes[0][0]} to {self.changes[-1][0]}" if self.changes
                 else "no dated changes")
        return f"{releases}; {dates}"

    def resolve_date(self, version: str) -> str:
        """The YYYY-MM date of ``version`` (a release of this profile or a date); InputError otherwise."""
        if version in self.releases:
            return self.releases[version]
        text = version.strip()
        if _DATE.match(text) and 1 <= int(text[5:7]) <= 12:
            if self.first_release is not None:
                if text < self.first_release[0]:
                    first = self.first_release[0]
                    raise InputError(f"version {version!r} of {self.name} predates its first release ({first}, "
                                     f"sourced in its profile); give a release or a date YYYY-MM from {first} on "
                                     f"({self.name} knows {self.known_versions()})", field="--framework")
            elif text < min([EARLIEST_FRAMEWORK_DATE, *self.dates]):
                raise InputError(f"version {version!r} of {self.name} predates every framework autotune profiles (the "
                                 f"oldest, Megatron-LM, appeared in {EARLIEST_FRAMEWORK_DATE}); give a release or a "
                                 f"date YYYY-MM ({self.name} knows {self.known_versions()})", field="--framework")
            return text
        raise InputError(f"unknown version {version!r} of {self.name}; give a release or a date YYYY-MM "
                         f"({self.name} knows {self.known_versions()})", field="--framework")

    def version_note(self, version: str) -> str:
        """A note when ``version`` is a date after the newest change profiled (``""`` otherwise): such a date
        resolves, as every date does, to the changes made by then -- the newest settings the profile knows --
        but they may miss what changed since."""
        if not version or version in self.releases or not self.newest:
            return ""
        date = self.resolve_date(version)
        if date <= self.newest:
            return ""
        return (f"{self.name}@{version} is newer than any version profiled ({self.known_versions()}); the newest "
                "profiled settings are used")

    def at(self, version: str = "") -> Framework:
        date = self.resolve_date(version) if version else ""
        traits = dict(self.base)
        sources = dict(self.sources)
        applied = []
        for since, change, why in self.changes:
            if not date or since <= date:
                traits.update(change)
                sources.update({k: f"{why} (from {since})" for k in change})
                applied.append(since)
        return Framework(name=self.name, version=version, date=date, description=self.description,
                         sources=MappingProxyType(sources), changes_applied=tuple(applied), **traits)


def profile_from_mapping(data: dict, *, source: str) -> FrameworkProfile:
    check_keys(data, _TOP_KEYS, source=source)
    name = loading.text(data, "name", source=source, blank=False)
    base = _traits(data.get("traits"), source=source, section="traits", complete=True)
    sources_raw = data.get("sources")
    if not isinstance(sources_raw, dict):
        raise InputError("must map every trait to its source", source=source, field="sources")
    check_keys(sources_raw, frozenset(TRAITS), source=source, section="sources")
    stated = data.get("traits") or {}
    unsourced = [t for t in TRAITS if not str(sources_raw.get(t) or "").strip()
                 and not (t in _OPTIONAL and t not in stated)]
    if unsourced:
        raise InputError(f"every trait needs a source; none for {', '.join(unsourced)}", source=source,
                         field=f"sources.{unsourced[0]}")
    sources_raw = {**{k: why for k, (_, why) in _OPTIONAL.items() if k not in stated}, **sources_raw}
    # None (or the key left out) is no releases; 0, false, [] or "" are not read as that (an empty section under a
    # falsy value passed as none, as a profile's efficiency: 0 once did)
    releases_raw = {} if data.get("releases") is None else data["releases"]
    if not isinstance(releases_raw, dict):
        raise InputError("must map release names to dates YYYY-MM", source=source, field="releases")
    releases = {str(k): _date(v, source=source, where=f"releases.{k}") for k, v in releases_raw.items()}
    changes_raw = [] if data.get("changes") is None else data["changes"]
    if not isinstance(changes_raw, list):
        raise InputError("must be a list of {since, traits, source}", source=source, field="changes")
    changes = []
    for i, change in enumerate(changes_raw):
        where = f"changes[{i}]"
        if not isinstance(change, dict):
            raise InputError("must be a mapping {since, traits, source}", source=source, field=where)
        check_keys(change, _CHANGE_KEYS, source=source, section=where)
        since = _date(change.get("since"), source=source, where=f"{where}.since")
        traits = _traits(change.get("traits"), source=source, section=f"{where}.traits", complete=False)
        why = change.get("source")
        if not isinstance(why, str) or not why.strip():
            raise InputError("must name the source of the change", source=source, field=f"{where}.source")
        changes.append((since, MappingProxyType(traits), why))
    if [c[0] for c in changes] != sorted(c[0] for c in changes):
        raise InputError("must be in date order (oldest first)", source=source, field="changes")
    dates = [c[0] for c in changes]
    if len(set(dates)) != len(dates):  # which of the two applies first would be the file's order, not a date
        twice = next(d for d in dates if dates.count(d) > 1)
        raise InputError(f"must date each change once, but got two changes since {twice}; merge them into one",
                         source=source, field="changes")
    profile = FrameworkProfile(name=name, description=loading.text(data, "description", source=source, default=""),
                               base=MappingProxyType(base), changes=tuple(changes),
                               releases=MappingProxyType(releases),
                               sources=MappingProxyType({k: str(v) for k, v in sources_raw.items()}), source=source,
                               first_release=_first_release(data.get("first_release"), source=source))
    if profile.first_release and min(profile.dates, default="9999-12") < profile.first_release[0]:
        raise InputError(f"a change or release dated {min(profile.dates)} predates the first release "
                         f"({profile.first_release[0]}); correct one of the dates", source=source,
                         field="first_release.date")
    return profile


def _first_release(raw: Any, *, source: str) -> tuple[str, str] | None:
    """``first_release: {date: YYYY-MM, source: "..."}`` (optional): the date and where it is from."""
    if raw is None:
        return None
    if not isinstance(raw, dict):
        raise InputError("must be a mapping {date: YYYY-MM, source: ...}", source=source, field="first_release")
    check_keys(raw, _FIRST_RELEASE_KEYS, source=source, section="first_release")
    date = _date(raw.get("date"), source=source, where="first_release.date")
    why = raw.get("source")
    if not isinstance(why, str) or not why.strip():
        raise InputError("must name where the date comes from", source=source, field="first_release.source")
    return date, why.strip()


def framework_names() -> list[str]:
    return bundled_names("frameworks")


def parse_framework_spec(text: str) -> tuple[str, str]:
    """``NAME[@VERSION]`` -> (name, version); the version may be empty."""
    if not isinstance(text, str) or not text.strip():
        raise InputError(f"must read NAME[@VERSION] (e.g. megatron-lm@2024-07), but got {text!r}", field="--framework")
    name, _, version = text.strip().partition("@")
    if not name or (_ and not version):
        raise InputError(f"must read NAME[@VERSION] (e.g. megatron-lm@2024-07), but got {text!r}", field="--framework")
    return name.strip(), version.strip()


def load_profile(name_or_path: str) -> FrameworkProfile:
    data, source = read_named("frameworks", name_or_path, what="framework", field="--framework",
                              alternative="or pass a path to a framework profile YAML")
    return profile_from_mapping(data, source=source)


def load_framework(spec: str | None = None) -> Framework:
    """The framework ``NAME[@VERSION]`` (default :data:`DEFAULT_FRAMEWORK`, newest), traits resolved; an empty
    name is refused, not read as the default."""
    name, version = parse_framework_spec(DEFAULT_FRAMEWORK if spec is None else spec)
    return load_profile(name).at(version)


def framework_version_note(spec: str | None) -> str:
    """:meth:`FrameworkProfile.version_note` of ``NAME@VERSION`` (``""`` without a version, or for a spec that does
    not load: loading it reports that)."""
    try:
        name, version = parse_framework_spec(spec or DEFAULT_FRAMEWORK)
        return load_profile(name).version_note(version) if version else ""
    except InputError:
        return ""


def framework_for_run(name: str | None, version: str | None,
                      profiles: dict[str, FrameworkProfile] | None = None) -> Framework:
    """A measured run's framework from its ``framework`` and ``framework_version`` cells.

    ``profiles`` is the caller's cache of loaded profiles (name -> profile), filled as it goes.
    """
    name = (name or "").strip() or DEFAULT_FRAMEWORK
    cache = profiles if profiles is not None else {}
    if name not in cache:
        cache[name] = load_profile(name)
    try:
        return cache[name].at((version or "").strip())
    except InputError as exc:  # the version cell, not --framework
        raise InputError(exc.message, field="framework_version") from None
