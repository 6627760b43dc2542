"""``autotune report``: a self-contained HTML report and PNG figures of a search or a stored study."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..errors import InputError
from ..outputs.files import check_out_dir
from ..outputs.report import StudySource, build_report, require_matplotlib
from ..search.api import MAX_SEED
from .app import (FrameworkOpt, app, check_study_flags, given_on_command_line, path_option, progress, stderr,
                  stdout, user_errors)

MAX_REPORT_TRIALS = 10_000


@app.command(
    "report",
    epilog=("**Examples**\n\n    autotune search -m llama3-70b -H h100-sxm5-80gb --gpus 64 -s 8192 -b 512 --out runs/70b\n\n"
            "    autotune report runs/70b/plans.json --out runs/70b/report\n\n"
            "    autotune report runs/70b-serve --out runs/70b-serve/report   (a serving search: throughput against "
            "interactivity, latency against the targets, memory)\n\n"
            "    autotune report --storage sqlite:///tune.db --study llama8b --out report\n\n"
            "Draws with matplotlib, installed with autotune."),
)
def report_command(
    result: Annotated[Optional[Path], typer.Argument(help="A plans.json from `autotune search --out DIR` (or its folder), training or serving.", parser=path_option, metavar="<path>")] = None,
    out: Annotated[Path, typer.Option("--out", "-o", help="Folder for report.html and the PNG figures.", parser=path_option, metavar="<path>")] = Path("report"),
    trials: Annotated[int, typer.Option("--trials", help="Evaluations for the TPE / random convergence runs (0: skip). "
                                        "With --study: random search runs at the study's own budget; 0 skips it.")] = 100,
    seed: Annotated[int, typer.Option("--seed", help="Seed of the convergence runs and samples.")] = 0,
    storage: Annotated[Optional[str], typer.Option("--storage", help="Optuna storage URL of a stored study (instead of RESULT).")] = None,
    study: Annotated[Optional[str], typer.Option("--study", help="Study name in --storage.")] = None,
    force: Annotated[bool, typer.Option("--force", help="Allow --out to be a non-empty folder: report.html and figures of the same name are overwritten, and an earlier report's figures that this one does not draw are removed unless edited since.")] = False,
    framework: FrameworkOpt = None,
) -> None:
    """Write an HTML report of a training or serving search, or of a stored study (self-contained, works offline),
    and its figures as PNG files."""
    with user_errors():
        source: Path | StudySource
        check_study_flags(storage=storage, study=study)
        if storage or study:
            if result is not None:
                raise InputError("give a plans.json or a stored study (--storage with --study), not both",
                                 field="--storage")
            if not storage:
                raise InputError("--study needs the storage it lives in, e.g. --storage sqlite:///study.db (the "
                                 "--storage given to `autotune search` or `autotune tune`)", field="--storage")
            if not study:
                raise InputError("--storage needs the study's name: --study NAME (the --study given to "
                                 "`autotune search` or `autotune tune`)", field="--study")
            source = StudySource(storage, study)
        elif result is None:
            raise InputError("give a plans.json from `autotune search --out DIR`, or a stored study with "
                             "--storage URL --study NAME", field="RESULT")
        else:
            source = result
        if not 0 <= trials <= MAX_REPORT_TRIALS:
            raise InputError(f"must be between 0 and {MAX_REPORT_TRIALS:,} (each convergence run costs a TPE "
                             f"trial per evaluation), but got {trials:,}", field="--trials")
        if not 0 <= seed <= MAX_SEED:
            raise InputError(f"must be between 0 and {MAX_SEED}, but got {seed}", field="--seed")
        require_matplotlib()
        check_out_dir(out, force)
        with progress("report") as update:
            chosen = trials if given_on_command_line("trials", trials, 100) else None
            files = build_report(source, out, trials=chosen, seed=seed,
                                 progress=update, framework=framework)
        stdout.print(f"Wrote {files.html} and {len(files.pngs)} figures: " + ", ".join(p.name for p in files.pngs),
                     highlight=False, soft_wrap=True)
        if files.removed:
            stderr.print("[yellow]note:[/] removed the earlier report's figures that this one does not draw: "
                         + escape(", ".join(p.name for p in files.removed)) + ".", highlight=False, soft_wrap=True)
        for path, why in files.kept:
            stderr.print(f"[yellow]note:[/] kept the earlier report's {escape(path.name)} ({escape(why)}); remove it "
                         "yourself if it is no longer wanted.", highlight=False, soft_wrap=True)
