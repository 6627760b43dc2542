"""Where the bundled profiles and search spaces live.

In a wheel they sit inside the package (``autotune/_bundled/...``, see
pyproject.toml); in a source checkout or an editable install they sit at the
repository root.  Both are looked up relative to this file, never the working
directory, so ``autotune`` finds them wherever it is run from.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent  # autotune/


def _first_existing(*candidates: Path) -> Path:
    for candidate in candidates:
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        "bundled data not found; looked in: " + ", ".join(str(c) for c in candidates)
    )


def bundled_dir(kind: str) -> Path:
    """Return the folder of a bundled kind: 'hardware', 'models', 'frameworks', 'catalogue' or 'search_spaces'."""
    if kind in ("hardware", "models", "frameworks", "catalogue"):
        return _first_existing(
            _PACKAGE_DIR / "_bundled" / "profiles" / kind,
            _PACKAGE_DIR.parent / "profiles" / kind,
        )
    if kind == "search_spaces":
        return _first_existing(
            _PACKAGE_DIR / "_bundled" / "search_spaces",
            _PACKAGE_DIR.parent / "search_spaces",
        )
    raise ValueError(f"kind must be 'hardware', 'models', 'frameworks', 'catalogue' or 'search_spaces', but got (kind={kind!r})")


def bundled_data(name: str) -> Path:
    """A file shipped in ``autotune/data`` (the measured training and serving runs), in a wheel or a checkout."""
    return _PACKAGE_DIR / "data" / name


def bundled_names(kind: str) -> list[str]:
    return sorted(p.stem for p in bundled_dir(kind).glob("*.yaml"))


def closest_name(name: str, names: list[str]) -> str | None:
    """The bundled name a mistyped one most likely meant: the same letters and digits whatever the separators and
    case (``llama-3.1-70b`` -> ``llama3.1-70b``), else the one name holding all its parts, else a close spelling
    (difflib), else None."""
    import difflib
    import re

    def key(text: str) -> str:
        return re.sub(r"[^a-z0-9]", "", text.lower())

    same = [n for n in names if key(n) == key(name)]
    if same:
        return same[0]
    # every part of a shortened name in one bundled name only (a100-80gb -> a100-sxm4-80gb)
    parts = [p for p in re.split(r"[^a-z0-9.]+", name.lower()) if p]
    holding = [n for n in names if parts and all(p in n.lower() for p in parts)]
    if len(holding) == 1:
        return holding[0]
    close = difflib.get_close_matches(name.lower(), names, n=1, cutoff=0.8)
    return close[0] if close else None


def require_name(name_or_path: str, *, kind: str, what: str, field: str) -> None:
    """Refuse an empty name (``-m ''``): as a path it is the working folder, which reads as "is a folder"."""
    from ..errors import InputError

    if not isinstance(name_or_path, str) or not name_or_path.strip():
        raise InputError(f"must not be empty: name a bundled {what} ({', '.join(bundled_names(kind))}) or a file, "
                         f"but got {name_or_path!r}", field=field)


def read_named(kind: str, name_or_path: str, *, what: str, field: str, alternative: str):
    """``(mapping, source)`` of a YAML given by path, or of the bundled file named ``name_or_path``.

    An unknown name is an error that lists the bundled names and the ``alternative``.
    """
    from pathlib import Path

    from ..errors import InputError
    from . import loading

    require_name(name_or_path, kind=kind, what=what, field=field)
    path = Path(name_or_path)
    if path.suffix in (".yaml", ".yml") or path.exists():
        return loading.read_mapping(path), str(path)
    bundled = bundled_dir(kind) / f"{name_or_path}.yaml"
    if not bundled.exists():
        names = bundled_names(kind)
        close = closest_name(name_or_path, names)
        hint = f" (did you mean {close!r}?)" if close else ""
        raise InputError(f"unknown {what} {name_or_path!r}{hint}; bundled: {', '.join(names)} ({alternative})",
                         field=field)
    folder = "search_spaces" if kind == "search_spaces" else f"profiles/{kind}"
    return loading.read_mapping(bundled), f"{folder}/{bundled.name}"
