"""``autotune report``: one self-contained HTML file and the same figures as PNG files.

``build_report(source, out_dir)`` gathers the data (:mod:`.data`) from a plans.json or a
stored study (:class:`.data.StudySource`) -- a serving plans.json goes to :mod:`.serving` --, draws the figures
with matplotlib (:mod:`.figures`) and writes ``report.html`` plus one PNG per figure.
matplotlib is the optional extra ``autotune[report]``; without it the command says so.
"""

from __future__ import annotations

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

        path = plans_path(source) or source  # the file, or the folder holding it
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


# report.html names its PNG files in this tag, so that a report written over it (--force) removes the figures it
# does not draw again: a training report's convergence.png beside a serving report's report.html is another run's
_FIGURES_META = re.compile(r'<meta name=autotune-figures content="([^"<>]*)">')


def _earlier_figures(out_dir: Path) -> list[str]:
    """The PNG names an earlier report.html in ``out_dir`` recorded (plain names in the folder only)."""
    try:
        found = _FIGURES_META.search((out_dir / "report.html").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return []
    names = found.group(1).split() if found else []
    return [n for n in names if n.endswith(".png") and "/" not in n and "\\" not in n and n not in (".png", "..png")]


def _write_report(out_dir: Path, figures: list, html: str) -> ReportFiles:
    """Write one PNG per figure and report.html (which records them); remove the PNGs an earlier report there
    recorded and this one does not draw."""
    earlier = _earlier_figures(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = []
    for fig in figures:
        path = unlink_symlink(out_dir / f"{fig.name}.png")
        path.write_bytes(fig.png)
        pngs.append(path)
    tag = f'<meta name=autotune-figures content="{" ".join(p.name for p in pngs)}">'
    head = "<meta charset=utf-8>"
    html = html.replace(head, head + tag, 1) if head in html else tag + html
    html_path = unlink_symlink(out_dir / "report.html")
    html_path.write_text(html, encoding="utf-8")
    written = {p.name for p in pngs}
    removed = []
    for name in earlier:
        path = out_dir / name
        if name not in written and path.is_file() and not path.is_symlink():
            path.unlink()
            removed.append(path)
    return ReportFiles(html_path, pngs, [f.title for f in figures], removed)


__all__ = ["EXTRA_HINT", "ReportFiles", "StudySource", "build_report", "require_matplotlib"]
