"""The validation figures the docs print are what `autotune validate --bundled ...` prints today.

docs/serving.md's serving_runs.csv table drifted by up to 0.2 point when the serving-runs parameters were refitted
and the H100/H200/B200 profiles took CUDA's memory totals (v0.20 read 8.5% where the command printed 8.7%), and
docs/accuracy.md's dense-bridge figures were checked only as "under 35%"; these tests read the tables as written.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from typer.testing import CliRunner

from autotune.cli import app

DOCS = Path(__file__).resolve().parent.parent / "docs"
runner = CliRunner()


def validate(name: str) -> dict:
    result = runner.invoke(app, ["validate", "--bundled", name, "--json"])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def pct(cell: str) -> float | None:
    """'11.4% (19.4%)' -> 11.4 (the figure before the bracketed old model's); '' -> None."""
    match = re.match(r"\s*([0-9.]+)\s*%", cell)
    return float(match.group(1)) if match else None


def test_serving_runs_table_matches_validate():
    text = (DOCS / "serving.md").read_text()
    table = text[text.index("**serving_runs.csv**"):]
    table = table[table.index("| source group | kind |"):]
    rows = [line for line in table.splitlines()[2:] if line.startswith("|")][:6]
    report = validate("serving")
    measured = {}
    for column, key in (("tok/s/GPU", "throughput_mape"), ("TTFT", "ttft_mape"), ("ITL", "itl_mape")):
        for group in report[key]:
            measured[(group["source_group"], group["kind"], column)] = (group["n"], group["mape_pct"])
    groups = {"TRTLLM v0.14.0": "TRTLLM_perf_overview_v0.14.0", "TRTLLM v0.20": "TRTLLM_perf_overview_v0.20",
              "TRTLLM v0.9.0 static": "TRTLLM_perf_overview_v0.9.0_static",
              "TRTLLM v0.14.0 online": "TRTLLM_perf_overview_v0.14.0_online"}
    kinds = {"max-throughput": "max-throughput", "static batch": "static", "single-request prefill": "prefill",
             "rate (request rate)": "rate", "max-throughput (unlimited rate)": "max-throughput"}
    checked = 0
    for line in rows:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        group, kind, n_rows = groups[cells[0]], kinds[cells[1]], int(cells[2])
        for column, cell in zip(("tok/s/GPU", "TTFT", "ITL"), cells[3:6]):
            written = pct(cell)
            if written is None:
                assert (group, kind, column) not in measured, (line, column)
                continue
            n, mape = measured[(group, kind, column)]
            assert round(mape, 1) == written, f"docs/serving.md says {written}% for {line!r} {column}, validate {mape:.2f}%"
            assert n <= n_rows
            checked += 1
    assert checked == 9


def test_dense_bridge_figures_in_accuracy_md_match_validate():
    text = (DOCS / "accuracy.md").read_text()
    report = validate("dense-bridge")
    total = re.search(r"\| all \| (\d+) \| \*\*([0-9.]+) %\*\* \|", text)
    assert total, "docs/accuracy.md's dense-bridge table lost its 'all' row"
    assert int(total.group(1)) == len(report["rows"]) == 42
    assert round(report["mape_pct"], 1) == float(total.group(2))
    nvfp4 = [abs(r["error_pct"]) for r in report["rows"] if r["id"].endswith("NVFP4")]
    written = re.search(r"the four NVFP4 rows are ([0-9.]+) % MAPE", " ".join(text.split()))
    assert written and round(sum(nvfp4) / len(nvfp4), 1) == float(written.group(1))


def test_training_targets_table_in_accuracy_md_matches_validate():
    """The targets table read 5.26 % after a change moved validate to 5.23 %; its throughput, memory and fit figures
    are what validate --bundled training prints."""
    text = (DOCS / "accuracy.md").read_text()
    report = validate("training")
    rows = len(report["rows"])
    throughput = re.search(rf"\| throughput MAPE, {rows} rows \| \*\*([0-9.]+) %\*\*", text)
    memory = re.search(r"\| memory MAPE, \d+ rows with measured memory \| \*\*([0-9.]+) %\*\*", text)
    fit = re.search(rf"\| runs predicted to fit with their own layout \| \*\*(\d+) of {rows} ", text)
    assert throughput and memory and fit, "docs/accuracy.md's targets table changed shape"
    assert f"{report['mape_pct']:.2f}" == throughput.group(1)
    assert f"{report['memory_mape_pct']:.2f}" == memory.group(1)
    assert round(report["fit_fraction"] * rows) == int(fit.group(1))
