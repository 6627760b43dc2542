"""The one error type for bad user input.

Invalid input (an unknown name, malformed YAML, a field out of range) raises
:class:`InputError` at load time; the CLI turns it into a short message and a
non-zero exit.  An infeasible plan is *not* an error: the cost model returns it
as a value with a reason.  A bug is an ``assert``.
"""

from __future__ import annotations

import difflib


class InputError(ValueError):
    """User input that cannot be used. The message names the file, the field and a fix."""

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.message = message  # without the file and field
        where = ""
        if source and field:
            where = f"{source}: field '{field}': "
        elif source:
            where = f"{source}: "
        elif field:
            where = f"field '{field}': "
        super().__init__(where + message)


# The top-level keys that mark each kind of file autotune reads, to name a file given where another kind goes
# (a hardware profile passed to --model listed all of its keys as unknown): (keys, what it is, where it goes).
_FILE_KINDS = (
    (frozenset({"peak_tflops", "memory_gib"}), "a hardware profile", "--hardware, or `autotune hardware show FILE`"),
    (frozenset({"n_layers", "hidden_size"}), "a model spec", "--model, or `autotune models show FILE`"),
    (frozenset({"num_hidden_layers", "model_type"}), "a Hugging Face config.json", "--model"),
    (frozenset({"axes"}), "a search space", "--space"),
    (frozenset({"traits"}), "a framework profile", "--framework"),
)


def check_keys(data: dict, allowed: set[str] | frozenset[str], *, source: str, section: str = "") -> None:
    """Reject unknown keys, listing them and the allowed ones (typos must not pass silently); a whole file of
    another kind is named as such."""
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        where = f"{section}." if section else ""
        kind = next(((what, goes) for keys, what, goes in _FILE_KINDS
                     if not section and keys <= set(unknown)), None)
        if kind is not None:
            raise InputError(f"is {kind[0]}, not the file this option reads (its keys {', '.join(unknown[:4])}"
                             f"{', ...' if len(unknown) > 4 else ''} are not among the allowed ones); give it to "
                             f"{kind[1]}", source=source)
        raise InputError(
            f"unknown key(s) {', '.join(with_guess(k, allowed, where) for k in unknown)}; "
            f"allowed: {', '.join(sorted(allowed))}",
            source=source,
        )


def with_guess(key: object, allowed: set[str] | frozenset[str], where: str = "") -> str:
    """``where + key``, with the allowed key it most likely misspells (``n_layer (did you mean n_layers?)``): the
    list of allowed keys runs to thirty names, in which a one-letter slip is hard to see."""
    close = difflib.get_close_matches(str(key), sorted(allowed), n=1, cutoff=0.75)
    return f"{where}{key} (did you mean {where}{close[0]}?)" if close else f"{where}{key}"


def require_keys(data: dict, required: set[str] | frozenset[str], *, source: str, section: str = "") -> None:
    missing = sorted(set(required) - set(data))
    if missing:
        where = f"{section}." if section else ""
        raise InputError(f"missing required key(s) {', '.join(where + k for k in missing)}", source=source)


def comma_items(text: str, *, what: str, field: str | None = None) -> list[str]:
    """The items of a comma-separated list (``"bf16,fp8"``), stripped; a blank ``text`` is no items.  An empty
    item is an error and not dropped, as ``"bf16,,fp8"`` or a trailing comma is more likely a slip than a choice
    (``what`` names the list in the message when no ``field`` does)."""
    items = [part.strip() for part in text.split(",")]
    if len(items) > 1 and not all(items):
        subject = "" if field else f"{what} "
        raise InputError(f"{subject}must be a comma-separated list without empty items, but got ({text!r}); "
                         "remove the extra comma", field=field)
    return [item for item in items if item]
