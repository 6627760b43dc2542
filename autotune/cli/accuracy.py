"""``autotune validate`` and ``autotune calibrate``: the cost model against measured runs."""

from __future__ import annotations

import os
import shlex
from pathlib import Path
from typing import Annotated, Callable, Mapping, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..errors import InputError
from ..inputs.calibration import load_calibration
from ..inputs.hardware import load_hardware
from ..inputs.measured_runs import read_columns
from ..inputs.resources import bundled_data
from ..outputs.files import check_out_file, unlink_symlink
from ..serving.overlay import load_serving_calibration, serving_calibration_text
from ..serving.runs import is_serving_schema
from ..serving.silicon import is_silicon_schema
from ..serving.validation import validate_serving_csv, validate_silicon_csv
from ..training.calibration import fit
from ..training.runs import MeasuredRun, SkippedRow, read_runs
from ..training.validation import validate_runs
from .app import JsonOut, app, path_option, print_json, progress, stderr, stdout, user_errors

BUNDLED = {"training": "training_runs.csv", "moe-training": "moe_training_runs.csv",
           "dense-bridge": "bridge_dense_training_runs.csv", "serving": "serving_runs.csv",
           "serving-silicon": "serving_silicon.csv"}


def _write_overlay(out: Path, write: Callable[[Path], object]) -> None:
    """Write the overlay to ``out`` (a symbolic link replaced, not followed).  A refusal that comes only with the
    write (/proc/version passes the checks, then fails with EIO) names the file and --out, which the OSError
    raised by a write() does not."""
    try:
        write(unlink_symlink(out))
    except OSError as exc:
        raise InputError(f"cannot be written ({exc.strerror or exc}); choose another --out", source=str(out),
                         field="--out") from None


def _runs_csv(path: Path | None, bundled: str | None) -> Path:
    """The CSV to read: the one given, or a bundled set of runs (``--bundled``, a key of BUNDLED)."""
    if bundled is not None:
        if path is not None:
            raise InputError("give a CSV or --bundled, not both", field="--bundled")
        if bundled not in BUNDLED:
            raise InputError(f"must be one of {', '.join(BUNDLED)}, but got {bundled!r}", field="--bundled")
        return bundled_data(BUNDLED[bundled])
    if path is None:
        raise InputError(f"give a CSV of measured runs, or --bundled {' | '.join(BUNDLED)} for the runs shipped with "
                         "autotune", field="RUNS_CSV")
    return path


@app.command(
    epilog=(
        "**Examples**\n\n"
        "    autotune validate --bundled training\n\n"
        "    autotune validate --bundled serving\n\n"
        "    autotune validate --bundled moe-training\n\n"
        "    autotune validate --bundled dense-bridge\n\n"
        "    autotune validate autotune/data/training_runs.csv\n\n"
        "    autotune validate my_runs.csv --calibration calib.yaml --json\n\n"
        "    autotune validate autotune/data/serving_runs.csv\n\n"
        "    autotune validate autotune/data/serving_silicon.csv --json\n\n"
        "The CSV columns are those of training_runs.csv (docs/validation.md), of serving_runs.csv or of "
        "serving_silicon.csv (docs/serving.md); the schema is detected from the columns. Optional columns may be left out. "
        "A setting a row leaves empty is evaluated over its possible values and the range is shown."
    )
)
def validate(
    runs_csv: Annotated[Optional[Path], typer.Argument(help="CSV of measured runs: training (docs/validation.md) or serving (docs/serving.md).", parser=path_option, metavar="<path>")] = None,
    bundled: Annotated[Optional[str], typer.Option("--bundled", help="Validate on runs shipped with autotune instead of a CSV: training | moe-training | dense-bridge | serving | serving-silicon.")] = None,
    calibration: Annotated[Optional[str], typer.Option("--calibration", help="Calibration overlay YAML.")] = None,
    json_out: JsonOut = False,
    worst: Annotated[int, typer.Option("--worst", help="Rows to show in the table, worst first (0: all).")] = 25,
) -> None:
    """Predict every measured run (training or serving) with its own layout; report the error per row and per group."""
    with user_errors():
        if worst < 0:
            raise InputError(f"must be >= 0 rows (0: all), but got {worst}", field="--worst")
        runs_csv = _runs_csv(runs_csv, bundled)
        columns = read_columns(runs_csv)
        if is_silicon_schema(columns):  # serving_silicon.csv schema (TTFT and TPOT per operating point)
            _validate_silicon(runs_csv, json_out=json_out, worst=worst, calibration=calibration)
            return
        if is_serving_schema(columns):  # serving_runs.csv schema
            _validate_serving(runs_csv, json_out=json_out, worst=worst, calibration=calibration)
            return
        runs = read_runs(runs_csv)
        _say_unread_columns(runs_csv, columns)
        overlay = load_calibration(calibration) if calibration is not None else None
        if overlay is not None:
            _check_overlay_hardware(overlay.efficiency, runs, runs_csv, calibration)
        report = validate_runs(runs, load_hardware, overlay)
        if not report.rows:
            reasons = "; ".join(f"{s.id}: {s.reason}" for s in report.skipped[:3])
            raise InputError(f"no usable rows to compare ({len(report.skipped)} skipped: {reasons or 'the file has no rows'})",
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


def _check_overlay_hardware(calibrated: Mapping[str, object], runs: list, path: Path, calibration: str) -> None:
    """A training --calibration overlay must calibrate the GPU of at least one row (as a serving overlay must name
    one of the rows' engines): one that names none would change nothing, and the report would read as calibrated."""
    gpus = set()
    for name in {run.gpu for run in runs if isinstance(run, MeasuredRun)}:  # each profile loaded once
        try:
            gpus.add(load_hardware(name).name)
        except (InputError, OSError, ValueError):  # its rows are skipped with the reason
            continue
    if gpus and not gpus & set(calibrated):
        raise InputError(f"the calibration overlay {calibration} calibrates {', '.join(sorted(calibrated))}, but the "
                         f"rows run on {', '.join(sorted(gpus))}; calibrate on runs of these GPUs (autotune "
                         "calibrate) or drop --calibration", source=str(path), field="--calibration")


def _validate_silicon(path: Path, *, json_out: bool, worst: int, calibration: str | None) -> None:
    params = load_serving_calibration(calibration) if calibration is not None else None
    report = validate_silicon_csv(path, params)
    if json_out:
        print_json(report.to_json())
        return
    if not report.rows:
        reasons = "; ".join(f"{s.id or '(no id)'}: {s.reason}" for s in report.skipped[:3])
        raise InputError(f"no serving row could be expressed ({len(report.skipped)} skipped: {reasons})",
                         source=str(path))
    rows = sorted(report.rows, key=lambda r: -max(abs(r.ttft_error_pct or 0), abs(r.tpot_error_pct or 0)))
    table = Table(title=f"{len(report.rows)} measured operating points, worst first", header_style="bold",
                  caption="meas/pred: measured / predicted (error); the rows' ids with --json",
                  caption_justify="left")
    # a 132-column terminal holds every column: a long model name ends in an ellipsis, a disaggregated layout
    # folds onto a second line
    for col in ("engine", "model", "GPU", "layout", "I/O", "conc.", "TTFT ms meas/pred", "TPOT ms meas/pred"):
        table.add_column(col, justify="right" if col == "conc." else "left", no_wrap=col != "layout",
                         overflow="ellipsis" if col == "model" else "fold", max_width=16 if col == "model" else None,
                         min_width=10 if col == "layout" else None)
    for r in rows[: worst or None]:
        pt = "inf" if r.predicted_ttft_ms is None else f"{r.predicted_ttft_ms:,.0f}"
        ps = "inf" if r.predicted_tpot_ms is None else f"{r.predicted_tpot_ms:,.1f}"
        et = "-" if r.ttft_error_pct is None else f"{r.ttft_error_pct:+.0f}%"
        es = "-" if r.tpot_error_pct is None else f"{r.tpot_error_pct:+.0f}%"
        table.add_row(f"{r.engine} {r.mode}", r.hf_model_id.split("/")[-1], r.gpu, r.layout,
                      f"{r.input_len}/{r.output_len}", f"{r.concurrency:g}", f"{r.measured_ttft_ms:,.0f}/{pt} ({et})",
                      f"{r.measured_tpot_ms:,.1f}/{ps} ({es})")
    stdout.print(table)
    groups = Table(title="MAPE by engine and mode", header_style="bold")
    for col in ("engine", "mode", "rows", "TTFT", "TPOT"):
        groups.add_column(col, justify="left" if col in ("engine", "mode") else "right")
    for (engine, mode), (ttft, tpot) in sorted(report.groups.items()):
        groups.add_row(engine, mode, str(ttft.n), f"{ttft.mape_pct:.1f}%", f"{tpot.mape_pct:.1f}%")
    stdout.print(groups)
    stdout.print(f"[bold]TTFT MAPE {report.ttft_mape_pct:.1f}%, TPOT MAPE {report.tpot_mape_pct:.1f}%[/] over "
                 f"{len(report.rows)} rows; {len(report.skipped)} skipped (reasons with --json). {report.parameters}.",
                 highlight=False, soft_wrap=True)


def _pair(measured: float | None, predicted: float | None) -> str:
    """measured/predicted; an unbounded prediction (over capacity) reads "inf", not "nan"."""
    if measured is None:
        return "-"
    return f"{measured:,.1f}/{'inf' if predicted is None else f'{predicted:,.1f}'}"


def _validate_serving(path: Path, *, json_out: bool, worst: int, calibration: str | None = None) -> None:
    report = validate_serving_csv(path, load_serving_calibration(calibration) if calibration is not None else None)
    if json_out:
        print_json(report.to_json())
        return
    if not report.rows:
        why = ("the file has no rows" if not report.skipped else
               f"{len(report.skipped)} skipped, e.g. {report.skipped[0].id}: {report.skipped[0].reason}")
        raise InputError(f"no usable serving rows to compare ({why}); the reasons of all with --json", source=str(path))
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
            _pair(r.measured_ttft_ms, r.predicted_ttft_ms),
            _pair(r.measured_itl_ms, r.predicted_itl_ms),
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
        "    autotune calibrate autotune/data/serving_silicon.csv --out serving.yaml --leave-one-out\n\n"
        "    autotune search ... --calibration calib.yaml"
    )
)
def calibrate(
    runs_csv: Annotated[Path, typer.Argument(help="CSV of measured runs, training or serving (schema: docs/validation.md, docs/serving.md).", parser=path_option, metavar="<path>")],
    out: Annotated[Path, typer.Option("--out", help="Where to write the calibration overlay: YAML, or JSON for a path ending in .json (parent folders are created).", parser=path_option, metavar="<path>")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --out file.")] = False,
    json_out: JsonOut = False,
    leave_one_out: Annotated[bool, typer.Option("--leave-one-out", help="Serving, silicon schema: also refit once per model with its rows held out and report their error (minutes).")] = False,
) -> None:
    """Fit efficiency parameters to measured runs (training or serving CSV); report MAPE before, after and held out."""
    with user_errors():
        # the same file by any name: a path with '..', a symbolic link or a hard link (written in place, the CSV
        # would be lost under --force)
        if out.exists() and runs_csv.exists() and (out.resolve() == runs_csv.resolve() or _same_file(out, runs_csv)):
            raise InputError("is the CSV being calibrated; give the overlay another file name, e.g. calib.yaml",
                             source=str(out), field="--out")
        check_out_file(out, force)
        columns = read_columns(runs_csv)
        if is_silicon_schema(columns) or is_serving_schema(columns):
            _calibrate_serving(runs_csv, out, json_out=json_out, silicon=is_silicon_schema(columns),
                               leave_one_out=leave_one_out)
            return
        if leave_one_out:
            raise InputError("leave-one-model-out is for serving runs; a training calibration reports "
                             "leave-one-source-group-out already", field="--leave-one-out")
        runs = read_runs(runs_csv)
        _say_unread_columns(runs_csv, columns)
        usable = [r for r in runs if isinstance(r, MeasuredRun)]
        if not usable:
            skipped = [r for r in runs if isinstance(r, SkippedRow)]
            reasons = "; ".join(f"{s.id}: {s.reason}" for s in skipped[:3])
            raise InputError(f"no usable rows to fit ({len(skipped)} skipped: {reasons or 'the file has no rows'})",
                             source=str(runs_csv))
        with progress("calibrating: least squares per GPU type, then leave-one-source-group-out") as update:
            result = fit(runs, load_hardware, progress=update)
        out.parent.mkdir(parents=True, exist_ok=True)
        _write_overlay(out, result.write)
        # every row read is fitted or skipped (its reason: `autotune validate` on the same file)
        n_skipped = len(runs) - result.n_rows
        if json_out:
            print_json({**result.to_json(), "n_skipped": n_skipped})
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
        skipped = (f"; {n_skipped} skipped, `autotune validate {shlex.quote(str(runs_csv))}` says why"
                   if n_skipped else "")
        stdout.print(f"MAPE before {result.before.mape_pct:.1f}%, after {result.after.mape_pct:.1f}% "
                     f"({result.n_rows} rows{skipped}); leave-one-source-group-out {logo}.", highlight=False,
                     soft_wrap=True)
        for group, summary in result.logo.items():
            stdout.print(f"  held out {group}: {summary.n} rows, MAPE {summary.mape_pct:.1f}%", highlight=False)
        for note in result.notes():
            stderr.print(f"[bold yellow]note:[/] {escape(note)}", highlight=False, soft_wrap=True)
        stdout.print(f"Wrote {out}; apply it with --calibration {out}.", highlight=False)


def _say_unread_columns(path: Path, columns) -> None:
    """A note naming the columns of a training-runs CSV that the schema does not read (docs/validation.md)."""
    from ..training.runs import unread_columns

    unread = unread_columns(columns)
    if unread:
        stderr.print(f"[bold yellow]note:[/] {escape(str(path))}: column(s) {escape(', '.join(unread))} are not read "
                     "(docs/validation.md lists the schema's columns); their values do not enter any row",
                     highlight=False, soft_wrap=True)


def _same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:  # unreadable: the checks that follow report it
        return False


def _calibrate_serving(path: Path, out: Path, *, json_out: bool, silicon: bool, leave_one_out: bool) -> None:
    from ..serving.calibrated import CURRENT, LEGACY
    from ..serving.estimate import SERVING_PARAM_FIELDS
    from ..serving.validation import calibrate_serving_csv, fitted_parameter_count

    with stderr.status("fitting the serving parameters per engine (scipy least squares)"
                       + (", then leave-one-model-out" if leave_one_out else "")):
        result = calibrate_serving_csv(path, silicon=silicon, leave_one_out=leave_one_out)
    out.parent.mkdir(parents=True, exist_ok=True)
    text = serving_calibration_text(result.table, source=str(path), fit=result.summary(),
                                    as_json=out.suffix.lower() == ".json")
    _write_overlay(out, lambda target: target.write_text(text))
    n_params = fitted_parameter_count(sorted(result.table), silicon=silicon)
    near = ("the documented defaults (this is the bundled data the shipped fit was made from)"
            if result.anchor == "defaults" else "the shipped fit")
    if result.rows < n_params:
        # not an error: the fit pulls every parameter towards its anchor, so it still gives an overlay
        stderr.print(f"note: {escape(str(path))}: {result.rows} expressed row(s) for {n_params} fitted parameters; "
                     f"the parameters these rows cannot identify stay near {near} (add rows of more models, "
                     "GPUs, lengths and concurrencies for a fit that means more)", highlight=False, soft_wrap=True)
    if json_out:
        print_json({"schema": "serving-calibration", "engines": {e: p.as_dict() for e, p in result.table.items()},
                    **result.summary()})
        return
    shipped = CURRENT if silicon else LEGACY
    table = Table(title="Fitted serving parameters (shipped value in brackets)", header_style="bold")
    table.add_column("parameter")
    engines = sorted(result.table)
    for e in engines:
        table.add_column(e, justify="right")
    for name in SERVING_PARAM_FIELDS:
        cells = []
        for e in engines:
            base = shipped.get(e)
            ref = f" ({getattr(base, name):.4g})" if base is not None else ""
            cells.append(f"{getattr(result.table[e], name):.4g}{ref}")
        table.add_row(name, *cells)
    stdout.print(table)
    for line in result.lines():
        stdout.print(line, highlight=False, soft_wrap=True)
    stdout.print(f"Parameters the rows do not identify stay near {near}.", highlight=False, soft_wrap=True)
    stdout.print(f"Wrote {out}; apply it with --calibration {out}.", highlight=False)
