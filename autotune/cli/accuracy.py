"""``autotune validate`` and ``autotune calibrate``: the cost model against measured runs."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from ..errors import InputError
from ..inputs.calibration import load_calibration
from ..inputs.hardware import load_hardware
from ..inputs.measured_runs import read_columns
from ..inputs.resources import bundled_data
from ..outputs.files import check_out_file
from ..serving.runs import is_serving_schema
from ..serving.validation import validate_serving_csv
from ..training.calibration import fit
from ..training.runs import MeasuredRun, SkippedRow, read_runs
from ..training.validation import validate_runs
from .app import JsonOut, app, print_json, progress, stderr, stdout, user_errors

BUNDLED = {"training": "training_runs.csv", "serving": "serving_runs.csv"}


def _runs_csv(path: Path | None, bundled: str | None) -> Path:
    """The CSV to read: the one given, or the bundled training or serving runs (``--bundled``)."""
    if bundled is not None:
        if path is not None:
            raise InputError("give a CSV or --bundled, not both", field="--bundled")
        if bundled not in BUNDLED:
            raise InputError(f"must be training or serving, but got {bundled!r}", field="--bundled")
        return bundled_data(BUNDLED[bundled])
    if path is None:
        raise InputError("give a CSV of measured runs, or --bundled training (or serving) for the runs shipped with "
                         "autotune", field="RUNS_CSV")
    return path


@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune validate --bundled training\n\n"
        "    autotune validate --bundled serving\n\n"
        "    autotune validate autotune/data/training_runs.csv\n\n"
        "    autotune validate my_runs.csv --calibration calib.yaml --json\n\n"
        "    autotune validate autotune/data/serving_runs.csv\n\n"
        "The CSV columns are those of training_runs.csv (docs/validation.md) or of serving_runs.csv "
        "(docs/serving.md); the schema is detected from the columns. Optional columns may be left out. "
        "A setting a row leaves empty is evaluated over its possible values and the range is shown."
    )
)
def validate(
    runs_csv: Annotated[Optional[Path], typer.Argument(help="CSV of measured runs: training (docs/validation.md) or serving (docs/serving.md).")] = None,
    bundled: Annotated[Optional[str], typer.Option("--bundled", help="Validate on the runs shipped with autotune instead of a CSV: training | serving.")] = None,
    calibration: Annotated[Optional[str], typer.Option("--calibration", help="Calibration overlay YAML.")] = None,
    json_out: JsonOut = False,
    worst: Annotated[int, typer.Option("--worst", help="Rows to show in the table, worst first (0: all).")] = 25,
) -> None:
    """Predict every measured run (training or serving) with its own layout; report the error per row and per group."""
    with user_errors():
        runs_csv = _runs_csv(runs_csv, bundled)
        if is_serving_schema(read_columns(runs_csv)):  # serving_runs.csv schema
            if calibration:
                raise InputError("a calibration overlay adjusts the training cost model; the serving runs in "
                                 f"{runs_csv} are predicted with the serving model's own fitted parameters; leave "
                                 "--calibration out", field="--calibration")
            _validate_serving(runs_csv, json_out=json_out, worst=worst)
            return
        runs = read_runs(runs_csv)
        overlay = load_calibration(calibration) if calibration else None
        report = validate_runs(runs, load_hardware, overlay)
        if not report.rows:
            reasons = "; ".join(f"{s.id}: {s.reason}" for s in report.skipped[:3])
            raise InputError(f"no usable rows to compare ({len(report.skipped)} skipped: {reasons})",
                             source=str(runs_csv))
        if json_out:
            print_json(report.to_json())
            return
        rows = sorted(report.rows, key=lambda r: -abs(r.error_pct))
        table = Table(title=f"{len(report.rows)} runs, worst first", header_style="bold")
        for col in ("id", "source group", "measured tok/s/GPU", "predicted", "error", "range over unknowns",
                    "mem meas/pred GiB"):
            table.add_column(col, justify="left" if col in ("id", "source group") else "right")
        for r in rows[: worst or None]:
            lo, hi = r.predicted_range_tokens_per_s_per_gpu
            rng = "-" if not r.unknown_fields else f"{lo:,.0f}-{hi:,.0f} ({','.join(r.unknown_fields)})"
            mem = "-" if r.measured_memory_gib_per_gpu is None else f"{r.measured_memory_gib_per_gpu:.1f}/{r.predicted_memory_gib_per_gpu:.1f}"
            table.add_row(r.id, r.source_group, f"{r.measured_tokens_per_s_per_gpu:,.1f}",
                          f"{r.predicted_tokens_per_s_per_gpu:,.1f}", f"{r.error_pct:+.1f}%", rng, mem)
        stdout.print(table)
        groups = Table(title="Error by source group", header_style="bold")
        for col in ("source group", "rows", "MAPE"):
            groups.add_column(col, justify="left" if col == "source group" else "right")
        for name, summary in sorted(report.by_source_group.items(), key=lambda kv: -kv[1].mape_pct):
            groups.add_row(name, str(summary.n), f"{summary.mape_pct:.1f}%")
        stdout.print(groups)
        memory = "" if report.memory_mape_pct is None else f"; memory MAPE {report.memory_mape_pct:.1f}%"
        stdout.print(f"[bold]Throughput MAPE {report.mape_pct:.1f}%[/] over {len(report.rows)} rows{memory}; "
                     f"{len(report.skipped)} rows skipped. Point prediction: {report.point_prediction}.",
                     highlight=False, soft_wrap=True)
        fitting = len(report.rows) - len(report.not_fitting)
        stdout.print(f"Predicted to fit in memory with their own layout: {fitting} of {len(report.rows)} runs "
                     f"({report.fit_fraction:.1%})" + (f"; not fitting although they ran: "
                                                       f"{', '.join(report.not_fitting)}" if report.not_fitting else "")
                     + ".", highlight=False, soft_wrap=True)
        for skipped in report.skipped:
            stderr.print(f"[dim]skipped {skipped.id}: {skipped.reason}[/]", highlight=False, soft_wrap=True)


def _validate_serving(path: Path, *, json_out: bool, worst: int) -> None:
    report = validate_serving_csv(path)
    if json_out:
        print_json(report.to_json())
        return
    if not report.rows:
        raise InputError("no usable serving rows to compare; see the skipped reasons with --json", source=str(path))
    rows = sorted(report.rows, key=lambda r: -abs(r.error_pct if r.error_pct is not None else (r.ttft_error_pct or 0)))
    table = Table(title=f"{len(report.rows)} serving runs, worst first", header_style="bold")
    for col in ("id", "source group", "kind", "measured tok/s/GPU", "predicted", "error", "batch (pred)",
                "TTFT meas/pred ms", "ITL meas/pred ms"):
        table.add_column(col, justify="left" if col in ("id", "source group", "kind") else "right")
    for r in rows[: worst or None]:
        rng = f" ({r.predicted_range[0]:,.0f}-{r.predicted_range[1]:,.0f}, kv unknown)" if r.predicted_range else ""
        table.add_row(
            r.id, r.source_group, r.kind,
            "-" if r.measured_tokens_per_s_per_gpu is None else f"{r.measured_tokens_per_s_per_gpu:,.1f}",
            "-" if r.predicted_tokens_per_s_per_gpu is None else f"{r.predicted_tokens_per_s_per_gpu:,.1f}{rng}",
            "-" if r.error_pct is None else f"{r.error_pct:+.1f}%",
            "-" if r.predicted_batch is None else f"{r.predicted_batch:,.0f}",
            "-" if r.measured_ttft_ms is None else f"{r.measured_ttft_ms:,.1f}/{r.predicted_ttft_ms or float('nan'):,.1f}",
            "-" if r.measured_itl_ms is None else f"{r.measured_itl_ms:,.1f}/{r.predicted_itl_ms or float('nan'):,.1f}",
        )
    stdout.print(table)
    groups = Table(title="Serving error by source group and kind (MAPE)", header_style="bold")
    for col in ("source group", "kind", "rows", "tok/s/GPU", "TTFT", "ITL"):
        groups.add_column(col, justify="left" if col in ("source group", "kind") else "right")
    keys = sorted(set(report.throughput) | set(report.ttft) | set(report.itl))
    for key in keys:
        cells = []
        for table_ in (report.throughput, report.ttft, report.itl):
            s = table_.get(key)
            cells.append("-" if s is None else f"{s.mape_pct:.1f}% ({s.n})")
        n = max((t[key].n for t in (report.throughput, report.ttft, report.itl) if key in t), default=0)
        groups.add_row(key[0], key[1], str(n), *cells)
    stdout.print(groups)
    stdout.print(f"{len(report.rows)} rows compared, {len(report.skipped)} skipped. Max-throughput rows: the batch is "
                 "predicted (KV-cache bound), not read. Rows that leave the KV dtype unstated are predicted as the "
                 "mean over the dtypes the GPU supports (range shown).", highlight=False, soft_wrap=True)
    for skipped in report.skipped:
        stderr.print(f"[dim]skipped {skipped.id}: {skipped.reason}[/]", highlight=False, soft_wrap=True)


@app.command(
    epilog=(
        "**Example**\n\n"
        "    autotune calibrate my_runs.csv --out calib.yaml\n\n"
        "    autotune search ... --calibration calib.yaml"
    )
)
def calibrate(
    runs_csv: Annotated[Path, typer.Argument(help="CSV of measured training runs (schema: docs/validation.md).")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the calibration overlay YAML (parent folders are created).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --out file.")] = False,
    json_out: JsonOut = False,
) -> None:
    """Fit the profiles' efficiency parameters to measured training runs; report MAPE before, after and held out.
    (Serving runs: `autotune validate` reports the serving model's error; its parameters ship fitted.)"""
    with user_errors():
        check_out_file(out, force)
        runs = read_runs(runs_csv)
        usable = [r for r in runs if isinstance(r, MeasuredRun)]
        if not usable:
            skipped = [r for r in runs if isinstance(r, SkippedRow)]
            reasons = "; ".join(f"{s.id}: {s.reason}" for s in skipped[:3])
            raise InputError(f"no usable rows to fit ({len(skipped)} skipped: {reasons or 'the file has no rows'})",
                             source=str(runs_csv))
        with progress("calibrating: least squares per GPU type, then leave-one-source-group-out") as update:
            result = fit(runs, load_hardware, progress=update)
        out.parent.mkdir(parents=True, exist_ok=True)
        result.write(out)
        if json_out:
            print_json(result.to_json())
            return
        table = Table(title="Fitted efficiency parameters", header_style="bold")
        table.add_column("profile")
        table.add_column("parameter")
        table.add_column("before", justify="right")
        table.add_column("after", justify="right")
        for profile, values in result.fitted.items():
            for name, value in values.items():
                table.add_row(profile, name, f"{result.start[profile][name]:.4g}", f"{value:.4g}")
        stdout.print(table)
        logo = "-" if result.logo_mape_pct is None else f"{result.logo_mape_pct:.1f}%"
        stdout.print(f"MAPE before {result.before.mape_pct:.1f}%, after {result.after.mape_pct:.1f}% "
                     f"({result.n_rows} rows); leave-one-source-group-out {logo}.", highlight=False)
        for group, summary in result.logo.items():
            stdout.print(f"  held out {group}: {summary.n} rows, MAPE {summary.mape_pct:.1f}%", highlight=False)
        stdout.print(f"Wrote {out}; apply it with --calibration {out}.", highlight=False)
