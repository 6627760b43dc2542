"""The serving error tables of docs/serving.md ("Measured error"), from the bundled silicon rows.

For every expressed row of ``autotune/data/serving_silicon.csv`` the TPOT and TTFT predicted in sample (the
shipped parameters, ``serving/calibrated.py``) and leave-one-model-out (each ``hf_model_id`` held out and the
parameters refitted on the others from their defaults, as ``autotune calibrate --leave-one-out`` does), then
MAPE per engine and mode, per model and per GPU as markdown tables::

    python benchmarks/serving_error_tables.py            # about 5 minutes on two cores

``--in-sample`` skips the refits (seconds).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from autotune.serving.calibrated import CURRENT
from autotune.serving.silicon import SiliconRow, read_silicon_rows
from autotune.serving.validation import leave_one_model_out, predict_silicon

SILICON = Path(__file__).resolve().parent.parent / "autotune" / "data" / "serving_silicon.csv"


def _mape(predicted: np.ndarray, measured: np.ndarray) -> float:
    return float(np.mean(np.abs(predicted / measured - 1.0)) * 100.0)


def _table(title: str, keys: list[str], rows: list[SiliconRow], preds: dict[str, np.ndarray]) -> list[str]:
    lines = [f"| {title} | rows | TPOT in sample | TTFT in sample | TPOT held out | TTFT held out |",
             "|---|---:|---:|---:|---:|---:|"]
    measured_tpot = np.array([r.measured_tpot_ms for r in rows])
    measured_ttft = np.array([r.measured_ttft_ms for r in rows])
    for key in sorted(set(keys)) + ["all"]:
        m = np.array([k == key or key == "all" for k in keys])
        cells = [_mape(preds[name][m], measured[m]) for name, measured in
                 (("tpot", measured_tpot), ("ttft", measured_ttft), ("tpot_lomo", measured_tpot),
                  ("ttft_lomo", measured_ttft)) if name in preds]
        lines.append(f"| {key} | {int(m.sum())} | " + " | ".join(f"{c:.1f}%" for c in cells)
                     + " |" + " — |" * (4 - len(cells)))
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--in-sample", action="store_true", help="skip the leave-one-model-out refits")
    args = parser.parse_args()
    rows = [r for r in read_silicon_rows(SILICON) if isinstance(r, SiliconRow)]
    ttft, tpot = predict_silicon(rows, dict(CURRENT))
    preds = {"ttft": np.asarray(ttft), "tpot": np.asarray(tpot)}
    if not args.in_sample:
        held = leave_one_model_out(rows)
        lomo_ttft, lomo_tpot = np.zeros(len(rows)), np.zeros(len(rows))
        for model, (t, s) in held.items():
            where = [i for i, r in enumerate(rows) if r.hf_model_id == model]
            lomo_ttft[where], lomo_tpot[where] = t, s
        preds.update(ttft_lomo=lomo_ttft, tpot_lomo=lomo_tpot)
    print(f"{len(rows)} expressed rows of {SILICON.name}\n")
    for title, keys in (("engine, mode", [f"{r.engine} {r.mode}" for r in rows]),
                        ("held-out model", [r.hf_model_id for r in rows]),
                        ("GPU", [r.gpu for r in rows])):
        print("\n".join(_table(title, keys, rows, preds)) + "\n")


if __name__ == "__main__":
    main()
