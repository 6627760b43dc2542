"""``autotune report``: one self-contained HTML file and the same figures as PNG files.

``build_report(source, out_dir)`` gathers the data (:mod:`.data`) from a plans.json or a
stored study (:class:`.data.StudySource`) -- a serving plans.json goes to :mod:`.serving` --, draws the figures
with matplotlib (:mod:`.figures`) and writes ``report.html`` plus one PNG per figure.
matplotlib is the optional extra ``autotune[report]``; without it the command says so.
"""

from __future__ import annotations

import hashlib
import re

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import InputError
from ..files import unlink_symlink
from .data import StudySource

EXTRA_HINT = "pip install 'autotune[report]' (or pip install matplotlib)"


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        raise InputError(f"autotune report draws with matplotlib, which is not installed: {EXTRA_HINT}",
                         field="report") from None


@dataclass(frozen=True)
class ReportFiles:
    html: Path
    pngs: list[Path]
    figures: list[str]  # titles, in order
    removed: list[Path] = field(default_factory=list)  # an earlier report's figures this one does not draw
    kept: list[tuple[Path, str]] = field(default_factory=list)  # ... that stayed, each with why (edited since)


def build_report(source: Path | StudySource, out_dir: Path, *, trials: int | None = None, seed: int = 0,
                 progress: Callable[[str, int, int], None] | None = None, framework: str | None = None) -> ReportFiles:
    """``trials``: the convergence runs' evaluations of a training report (None: 100); a serving search is exact
    and has none, so a serving plans.json refuses a number of them (0, skip, is what it does anyway)."""
    require_matplotlib()
    from .data import gather
    from .figures import all_figures
    from .html import render

    if isinstance(source, Path):
        from ..files import plans_path, read_plans

        path = plans_path(source, plan_strings=False)  # the file, or the folder holding it
        document = read_plans(path)
        if document["inputs"].get("workload") == "serve":
            if framework is not None:
                raise InputError("is a serving plans.json: --framework names training software; leave it out",
                                 source=str(path), field="--framework")
            if trials:  # 0 (skip) is what a serving report does anyway
                raise InputError(f"is a serving plans.json: its search is exact, with no convergence runs for --trials "
                                 f"{trials} to size; leave it out", source=str(path), field="--trials")
            from .serving import serving_report

            figures, html = serving_report(document, str(path), seed=seed, progress=progress)
            return _write_report(out_dir, figures, html)
        source = path

    data = gather(source, trials=100 if trials is None else trials, seed=seed, progress=progress, framework=framework)
    figures = all_figures(data)
    return _write_report(out_dir, figures, render(data, figures))


# report.html names its PNG files in this tag, each with the sha256 of the bytes it wrote (``name:sha256``), so
# that a report written over it (--force) removes the figures it does not draw again (a training report's
# convergence.png beside a serving report's report.html is another run's) and only those: a figure edited since,
# or named without a digest (a report.html of an earlier autotune), is kept and said so.
_FIGURES_META = re.compile(r'<meta name=autotune-figures content="([^"<>]*)">')
_SHA256 = re.compile(r"[0-9a-f]{64}")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _earlier_figures(out_dir: Path) -> dict[str, str | None]:
    """The PNG names an earlier report.html in ``out_dir`` recorded (plain names in the folder only), each with the
    sha256 it recorded (None where it recorded none)."""
    try:
        found = _FIGURES_META.search((out_dir / "report.html").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return {}
    out: dict[str, str | None] = {}
    for entry in found.group(1).split() if found else []:
        name, _, digest = entry.rpartition(":") if ":" in entry else (entry, "", "")
        if name.endswith(".png") and "/" not in name and "\\" not in name and name not in (".png", "..png"):
            out[name] = digest.lower() if _SHA256.fullmatch(digest.lower()) else None
    return out


def _write_report(out_dir: Path, figures: list, html: str) -> ReportFiles:
    """Write one PNG per figure and report.html (which records them with their sha256); remove the PNGs an earlier
    report there recorded, this one does not draw and nobody changed since."""
    earlier = _earlier_figures(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs, digests = [], []
    for fig in figures:
        path = unlink_symlink(out_dir / f"{fig.name}.png")
        path.write_bytes(fig.png)
        pngs.append(path)
        digests.append(_sha256(fig.png))
    tag = f'<meta name=autotune-figures content="{" ".join(f"{p.name}:{d}" for p, d in zip(pngs, digests))}">'
    head = "<meta charset=utf-8>"
    html = html.replace(head, head + tag, 1) if head in html else tag + html
    html_path = unlink_symlink(out_dir / "report.html")
    html_path.write_text(html, encoding="utf-8")
    written = {p.name for p in pngs}
    removed: list[Path] = []
    kept: list[tuple[Path, str]] = []
    for name, digest in earlier.items():
        path = out_dir / name
        if name in written or not path.is_file() or path.is_symlink():
            continue
        try:
            if digest is None:
                kept.append((path, "its report recorded no checksum, so autotune cannot tell it is unedited"))
            elif _sha256(path.read_bytes()) != digest:
                kept.append((path, "edited since the report wrote it"))
            else:
                path.unlink()
                removed.append(path)
        except OSError as exc:
            kept.append((path, f"could not be checked or removed ({exc.strerror or exc})"))
    return ReportFiles(html_path, pngs, [f.title for f in figures], removed, kept)


__all__ = ["EXTRA_HINT", "ReportFiles", "StudySource", "build_report", "require_matplotlib"]
