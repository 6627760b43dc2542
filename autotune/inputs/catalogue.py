"""The bundled catalogue of Hugging Face model ids (profiles/catalogue/hf_models.yaml).

It maps an id such as ``deepseek-ai/DeepSeek-R1`` or ``nvidia/Llama-3.1-8B-Instruct-FP8`` to the
bundled spec of its architecture, with the weight format of that repository's checkpoint, so that
``--model <hf id>`` works and measured serving rows that name only an ``hf_model_id`` can be
predicted.  Ids are matched without regard to case (the Hub resolves them so), and in the other forms an id is
written in: with a revision (``moonshotai/Kimi-K2.5@main``, ``...@<commit>``: a revision of a repository keeps its
architecture), as the repository's address (``https://huggingface.co/moonshotai/Kimi-K2.5``, ``hf://...``, with a
trailing ``/`` or ``/tree/<revision>``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from types import MappingProxyType
from typing import Mapping

from ..errors import InputError, check_keys
from . import loading
from .resources import bundled_dir

CHECKPOINT_FORMATS = ("bf16", "fp8", "nvfp4", "mxfp4", "int4")
_ENTRY_KEYS = frozenset({"spec", "checkpoint", "scope", "source", "reason", "fp8_block", "remote_code"})


@dataclass(frozen=True)
class CatalogueEntry:
    """One Hugging Face id: the bundled spec of its architecture (None if it cannot be expressed)."""

    hf_id: str
    spec: str | None
    checkpoint: str | None = None  # weight format of the repository's checkpoint (CHECKPOINT_FORMATS)
    scope: str = ""  # which weights carry that format, when not all linear layers do
    fp8_block: int | None = None  # an fp8 checkpoint's scale block (weight_block_size), None: per-tensor/channel
    remote_code: bool = False  # the repository's tokenizer or model is its own code: the engines need --trust-remote-code
    source: str = ""
    reason: str = ""  # why an id without a spec cannot be expressed


def _path():
    return bundled_dir("catalogue") / "hf_models.yaml"


@lru_cache(maxsize=1)
def catalogue() -> Mapping[str, CatalogueEntry]:
    """Every entry, keyed by its id in lower case."""
    path = _path()
    source = f"profiles/catalogue/{path.name}"
    data = loading.read_mapping(path)
    check_keys(data, frozenset({"models"}), source=source)
    models = data.get("models")
    if not isinstance(models, dict) or not models:
        raise InputError("must map Hugging Face ids to entries", source=source, field="models")
    entries: dict[str, CatalogueEntry] = {}
    for hf_id, raw in models.items():
        section = f"models.{hf_id}"
        if not isinstance(raw, dict):
            raise InputError("must be a mapping (spec, checkpoint, source)", source=source, field=section)
        check_keys(raw, _ENTRY_KEYS, source=source, section=section)
        spec = loading.text(raw, "spec", source=source, section=section, default=None)
        if spec is None:
            reason = loading.text(raw, "reason", source=source, section=section)
            entry = CatalogueEntry(hf_id=hf_id, spec=None, reason=reason.strip())
        else:
            entry = CatalogueEntry(
                hf_id=hf_id,
                spec=spec,
                checkpoint=loading.text(raw, "checkpoint", source=source, section=section, choices=CHECKPOINT_FORMATS),
                scope=loading.text(raw, "scope", source=source, section=section, default=""),
                source=loading.text(raw, "source", source=source, section=section),
                fp8_block=None if raw.get("fp8_block") is None else int(loading.number(
                    raw, "fp8_block", source=source, section=section, minimum=1, maximum=4096)),
                remote_code=loading.boolean(raw, "remote_code", source=source, section=section, default=False),
            )
        if hf_id.lower() in entries:
            raise InputError(f"lists {hf_id!r} twice (ids are matched without regard to case)", source=source,
                             field=section)
        entries[hf_id.lower()] = entry
    return MappingProxyType(entries)


def hf_ids() -> list[str]:
    """The ids the catalogue knows, as spelled there."""
    return sorted(entry.hf_id for entry in catalogue().values())


# The repository's address on the Hub (or the hf:// file-system form) around an id, and a revision after it.
_ADDRESS = re.compile(r"^(?:(?:https?://)?(?:www\.)?huggingface\.co/|hf://)", re.IGNORECASE)
_TREE = re.compile(r"/(?:tree|blob|resolve)/([^/]+).*$")
# A file of a repository on the Hub: .../blob/<rev>/<path> or .../resolve/<rev>/<path>
_FILE = re.compile(r"^([^/@]+/[^/@]+)/(?:blob|resolve)/([^/]+)/(.+)$")


def hf_id_parts(text: str) -> tuple[str, str | None]:
    """``(org/name, revision or None)`` of an id as users write it: ``org/name``, ``org/name@rev``, or the
    repository's address (``https://huggingface.co/org/name``, ``.../tree/rev``, ``hf://org/name@rev``, a trailing
    ``/``).  Text that is none of these comes back stripped, with no revision; so does an id with two revisions
    (``org/name@a@b``) or an empty one (``org/name@``), which :func:`hf_id_problem` says is wrong."""
    key = text.strip()
    bare = _ADDRESS.sub("", key)
    revision = None
    if bare != key:  # an address: /tree/<rev> names a revision, a trailing / nothing
        found = _TREE.search(bare)
        if found:
            revision, bare = found.group(1), bare[: found.start()]
        bare = bare.strip("/")
    elif bare.endswith("/") and bare.count("/") == 2:
        bare = bare.rstrip("/")
    name, at, rev = bare.partition("@")
    if at and rev and "/" in name and "@" not in rev:
        bare, revision = name, rev
    elif at:  # org/name@, org/name@a@b: not an id (hf_id_problem)
        return key, None
    return bare, revision


def hf_id_problem(text: str) -> str | None:
    """Why ``text``, written as a Hugging Face id (it holds a ``/``), names no repository and revision: two ``@``
    (``org/name@main@x``) or an empty revision (``org/name@``).  None for an id :func:`hf_id_parts` reads, and for
    text that is no id at all (a bundled name, a path: the caller's to say)."""
    bare = _ADDRESS.sub("", text.strip())
    name, at, rev = bare.partition("@")
    if not at or "/" not in name:
        return None
    if "@" in rev:
        return (f"it names more than one revision (@{rev}); write ORG/NAME, or ORG/NAME@REVISION for one revision "
                f"(e.g. {name.strip('/')}@main)")
    if not rev.strip():
        return f"its revision after @ is empty; write {name.strip('/')} or {name.strip('/')}@REVISION"
    return None


def is_hf_address(text: str) -> bool:
    """Whether ``text`` is written as an address on the Hub (``https://huggingface.co/...``, ``hf://...``)."""
    return _ADDRESS.match(text.strip()) is not None


def hf_file_address(text: str) -> tuple[str, str, str] | None:
    """``(org/name, revision, path)`` when ``text`` is the address of a file in a repository on the Hub
    (``https://huggingface.co/org/name/blob/main/config.json``, ``.../resolve/main/config.json``); None otherwise.
    autotune fetches nothing: such a name is refused with the id to give instead (``modelspec.load_model``)."""
    key = text.strip()
    bare = _ADDRESS.sub("", key)
    if bare == key:
        return None
    found = _FILE.match(bare)
    if not found or not found.group(3).strip("/"):
        return None
    return found.group(1), found.group(2), found.group(3).strip("/")


def canonical_hf_id(text: str) -> str:
    """One spelling of a model id for every way a row writes it: the catalogue's id (as spelled there) of a listed
    model, whatever its case, revision or address form; else the ``org/name`` of :func:`hf_id_parts` (no revision, no
    address) in lower case, as the Hub matches ids.  Text that is no id comes back stripped."""
    entry = lookup_hf_id(text)
    if entry is not None:
        return entry.hf_id
    bare, _ = hf_id_parts(text)
    return bare.lower() if "/" in bare and hf_id_problem(text) is None else text.strip()


@lru_cache(maxsize=64)
def fp8_block_of(spec: str) -> int | None:
    """The scale block of the fp8 checkpoints published for the architecture ``spec``, where every one the catalogue
    records is block-scaled (DeepSeek-V3/R1, Qwen3-235B-A22B-FP8, MiniMax-M2.5: 128); None where one is not (NVIDIA's
    per-tensor ModelOpt exports) or none is recorded, and --checkpoint fp8 cannot say which it is."""
    blocks = [e.fp8_block for e in catalogue().values() if e.spec == spec and e.checkpoint == "fp8"]
    if not blocks or any(b is None for b in blocks):
        return None
    return min(blocks)


def lookup_hf_id(hf_id: str) -> CatalogueEntry | None:
    """The entry of ``hf_id`` (any case, with a revision or as the repository's address: :func:`hf_id_parts`), or
    None if the catalogue does not list it."""
    entries = catalogue()
    entry = entries.get(hf_id.strip().lower())
    if entry is not None or hf_id_problem(hf_id) is not None:  # org/name@a@b names no revision: not listed
        return entry
    return entries.get(hf_id_parts(hf_id)[0].lower())


def model_label(typed: str | None, spec: str) -> str:
    """What the outputs call a model: the Hugging Face id the user typed when the catalogue maps it to the bundled
    spec planned (``deepseek-ai/DeepSeek-R1``, planned as ``deepseek-v3``), as the catalogue spells it, with the
    revision typed; else the spec's own name (a bundled name, a spec YAML, a config.json)."""
    if not isinstance(typed, str) or "/" not in typed or typed.strip() == spec:
        return spec
    entry = lookup_hf_id(typed)
    if entry is None or entry.spec != spec:
        return spec
    revision = hf_id_parts(typed)[1]
    return entry.hf_id + (f"@{revision}" if revision else "")


def ids_of_spec(spec: str, checkpoint: str) -> list[str]:
    """The catalogue's ids of a bundled spec whose checkpoint format (CHECKPOINT_FORMATS) is ``checkpoint``: examples
    of weights to serve for a plan given by the spec's name."""
    return [e.hf_id for e in catalogue().values() if e.spec == spec and e.checkpoint == checkpoint]


def resolve_hf_id(hf_id: str) -> CatalogueEntry | None:
    """The entry of ``hf_id`` if it maps to a bundled spec; None if the catalogue does not list it.

    A listed id that cannot be expressed is an error that says why.
    """
    entry = lookup_hf_id(hf_id)
    if entry is not None and entry.spec is None:
        raise InputError(f"{hf_id!r} cannot be planned with a bundled spec: {entry.reason}", field="--model")
    return entry
