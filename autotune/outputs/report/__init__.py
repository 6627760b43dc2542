"""``autotune report``: one self-contained HTML file and the same figures as PNG files.

``build_report(source, out_dir)`` gathers the data (:mod:`.data`) from a plans.json or a
stored study (:class:`.data.StudySource`) -- a serving plans.json goes to :mod:`.serving` --, draws the figures
with matplotlib (:mod:`.figures`) and writes ``report.html`` plus one PNG per figure.
matplotlib is the optional extra ``autotune[report]``; without it the command says so.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
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
            from .serving import build_serving_report

            html_path, pngs, titles = build_serving_report(document, str(path), out_dir, seed=seed, progress=progress)
            return ReportFiles(html_path, pngs, titles)
        source = path

    data = gather(source, trials=100 if trials is None else trials, seed=seed, progress=progress, framework=framework)
    figures = all_figures(data)
    out_dir.mkdir(parents=True, exist_ok=True)
    pngs = []
    for fig in figures:
        path = unlink_symlink(out_dir / f"{fig.name}.png")
        path.write_bytes(fig.png)
        pngs.append(path)
    html_path = unlink_symlink(out_dir / "report.html")
    html_path.write_text(render(data, figures), encoding="utf-8")
    return ReportFiles(html_path, pngs, [f.title for f in figures])


__all__ = ["EXTRA_HINT", "ReportFiles", "StudySource", "build_report", "require_matplotlib"]
