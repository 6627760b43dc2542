"""``autotune validate`` and ``autotune calibrate``: the cost model against measured runs."""


import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from .errors import InputError


def _loader():
    from .hardware import load_hardware

    return load_hardware


def register(app: typer.Typer) -> None:
    from .cli import JsonOut, stderr, stdout, user_errors

    @app.command(
        epilog=(
            "**Examples**\n\n"
            "    autotune validate autotune/data/training_runs.csv\n\n"
            "    autotune validate my_runs.csv --calibration calib.yaml --json\n\n"
            "The CSV columns are those of training_runs.csv (docs/validation.md); optional ones may be left out. "
            "A setting a row leaves empty is evaluated over its possible values and the range is shown."
        )
    )
    def validate(
        runs_csv: Annotated[Path, typer.Argument(help="CSV of measured runs (schema: docs/validation.md).")],
        calibration: Annotated[Optional[str], typer.Option("--calibration", help="Calibration overlay YAML.")] = None,
        json_out: JsonOut = False,
        worst: Annotated[int, typer.Option("--worst", help="Rows to show in the table, worst first (0: all).")] = 25,
    ) -> None:
        """Predict every measured run with its own layout and report the error, per row and per source group."""
        from .calibration import load_calibration
        from .runs import read_runs
        from .validation import validate_runs

        with user_errors():
            from . import cli_serve
            from .serving.runs import is_serving_schema

            if is_serving_schema(cli_serve.csv_columns(runs_csv)):  # serving_runs.csv schema
                cli_serve.validate_serving_csv(runs_csv, json_out=json_out, worst=worst, stdout=stdout, stderr=stderr)
                return
            runs = read_runs(runs_csv)
            overlay = load_calibration(calibration) if calibration else None
            report = validate_runs(runs, _loader(), overlay)
            if not report.rows:
                reasons = "; ".join(f"{s.id}: {s.reason}" for s in report.skipped[:3])
                raise InputError(f"no usable rows to compare ({len(report.skipped)} skipped: {reasons})",
                                 source=str(runs_csv))
            if json_out:
                print(json.dumps(report.to_json()))
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

    @app.command(
        epilog=(
            "**Example**\n\n"
            "    autotune calibrate my_runs.csv --out calib.yaml\n\n"
            "    autotune search ... --calibration calib.yaml"
        )
    )
    def calibrate(
        runs_csv: Annotated[Path, typer.Argument(help="CSV of measured runs (schema: docs/validation.md).")],
        out: Annotated[Path, typer.Option("--out", help="Where to write the calibration overlay YAML.")],
        force: Annotated[bool, typer.Option("--force", help="Overwrite an existing --out file.")] = False,
        json_out: JsonOut = False,
    ) -> None:
        """Fit the profiles' efficiency parameters to measured runs; report MAPE before, after and held out."""
        from .calibration import fit
        from .runs import read_runs

        with user_errors():
            if out.exists() and not force:
                raise InputError("exists; choose another --out or pass --force to overwrite it", source=str(out))
            runs = read_runs(runs_csv)
            with stderr.status("fitting (least squares per GPU type, then leave-one-source-group-out)"):
                result = fit(runs, _loader())
            result.write(out)
            if json_out:
                print(json.dumps(result.to_json()))
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
