"""One self-contained HTML file: inline CSS, figures as base64 PNG data URIs, no network access at all."""

from __future__ import annotations

import base64
import html
from typing import Any

from .data import ReportData
from .figures import Figure

_CSS = """
body{font-family:system-ui,-apple-system,"Segoe UI",sans-serif;margin:2rem auto;max-width:1100px;color:#222;
padding:0 1rem;line-height:1.45}
h1{font-size:1.5rem;margin-bottom:.2rem}h2{font-size:1.15rem;margin-top:2rem}
.sub{color:#555;margin-top:0}.summary{background:#f3f6fa;border-left:4px solid #0072B2;padding:.7rem 1rem}
table{border-collapse:collapse;font-size:.85rem;margin:.5rem 0}th,td{padding:.25rem .6rem;border-bottom:1px solid #ddd}
th{text-align:left;background:#fafafa}td.n{text-align:right;font-variant-numeric:tabular-nums}
figure{margin:1.5rem 0}figure img{max-width:100%;height:auto;border:1px solid #eee}
figcaption{color:#444;font-size:.85rem;max-width:900px}.note{color:#666;font-size:.85rem}
"""

# Marks the page once every figure has decoded, so a headless browser (and a person's console) can tell.
_SCRIPT = """
window.addEventListener("load", function () {
  var imgs = document.querySelectorAll("figure img");
  var ok = 0;
  imgs.forEach(function (img) {
    if (img.complete && img.naturalWidth > 0) { ok += 1; } else { console.error("figure failed: " + img.alt); }
  });
  document.body.setAttribute("data-figures-total", String(imgs.length));
  document.body.setAttribute("data-figures-rendered", String(ok));
});
"""


def _e(value: Any) -> str:
    return html.escape(str(value))


def _plans_table(data: ReportData) -> str:
    from ...training.plan import plan_from_fields
    from ..tables import settings_short

    rows = []
    with_measured = all("measured_tokens_per_s_per_gpu" in p for p in data.plans[:10])
    for p in data.plans[:10]:
        est = p["estimate"]
        try:
            plan = plan_from_fields(p["plan"], int(data.inputs["gpus"]))
            layout, settings = plan.layout(), settings_short(plan)
        except (ValueError, KeyError, TypeError):
            layout, settings = ", ".join(f"{k}={v}" for k, v in p["plan"].items()), ""
        days = f"{est['training_days']:,.1f}" if "training_days" in est else "-"
        measured = (f"<td class=n>{p['measured_tokens_per_s_per_gpu']:,.0f}</td><td class=n>{p['trial']}</td>"
                    if with_measured else "")
        rows.append(
            f"<tr><td class=n>{p['rank']}</td><td>{_e(layout)}</td><td>{_e(settings)}</td>{measured}"
            f"<td class=n>{est['step_time_s']:.2f}</td><td class=n>{est['tokens_per_s_per_gpu']:,.0f}</td>"
            f"<td class=n>{est['mfu']:.1%}</td><td class=n>{est['memory_gib_per_gpu']:.1f}</td>"
            f"<td class=n>{est['cost_usd_per_million_tokens']:.3f}</td><td class=n>{days}</td></tr>")
    head = ("<tr><th>#</th><th>layout</th><th>settings</th>"
            + ("<th>measured tok/s/GPU</th><th>trial</th>" if with_measured else "")
            + "<th>step s</th><th>tok/s/GPU</th><th>MFU</th><th>GiB/GPU</th><th>$/Mtok</th><th>days</th></tr>")
    note = ("<p class=note>Ranked by measured throughput; the other columns are the cost model's estimate of the "
            "plan.</p>" if with_measured else "")
    return f"<table>{head}{''.join(rows)}</table>{note}"


def _measured_table(data: ReportData) -> str:
    """A tune study's benchmark runs in trial order: measured against predicted, and why a run failed."""
    def num(value, fmt: str) -> str:
        return "-" if value is None else format(value, fmt)

    rows = []
    for r in data.measured or []:
        rows.append(
            f"<tr><td class=n>{r['trial']}</td><td>{_e(r['plan_key'])}</td><td>{_e(r['outcome'])}</td>"
            f"<td class=n>{num(r['measured_tokens_per_s_per_gpu'], ',.1f')}</td>"
            f"<td class=n>{num(r['predicted_tokens_per_s_per_gpu'], ',.1f')}</td>"
            f"<td class=n>{num(r['error_pct'], '+.1f')}{'%' if r['error_pct'] is not None else ''}</td>"
            f"<td class=n>{num(r['measured_peak_gib'], '.1f')}</td><td class=n>{num(r['predicted_memory_gib'], '.1f')}</td>"
            f"<td>{_e(r['reason'] or '')}</td></tr>")
    head = ("<tr><th>trial</th><th>plan</th><th>outcome</th><th>measured tok/s/GPU</th><th>predicted</th>"
            "<th>error</th><th>peak GiB</th><th>predicted GiB</th><th>failure</th></tr>")
    return (f"<table>{head}{''.join(rows)}</table><p class=note>error = predicted / measured - 1, as "
            "`autotune tune` reports it.</p>")


def _capacity_table(cap: dict[str, Any]) -> str:
    rows = []
    for c in cap.get("candidates", []):
        if not c.get("plan"):
            rows.append(f"<tr><td>{_e(c['hardware'])}</td><td class=n>{c['gpus']}</td>"
                        f"<td colspan=6>{_e(c.get('note', 'no plan fits'))}</td></tr>")
            continue
        mark = "yes" if c.get("meets_deadline") else "no"
        rows.append(
            f"<tr><td>{_e(c['hardware'])}</td><td class=n>{c['gpus']}</td><td class=n>{c['training_days']:,.1f}</td>"
            f"<td class=n>{c['gpu_hours']:,.0f}</td><td class=n>${c['cost_usd']:,.0f}</td>"
            f"<td class=n>{c['energy_mwh']:,.0f}</td><td class=n>{c['co2e_t']:,.0f}</td><td>{mark}</td></tr>")
    head = ("<tr><th>hardware</th><th>GPUs</th><th>days</th><th>GPU-hours</th><th>cost</th><th>MWh</th>"
            "<th>t CO2e</th><th>in time</th></tr>")
    foot = (f"<p class=note>Energy = GPUs x average board power x hours x PUE {cap['pue']:g} ({_e(cap['pue_source'])}); "
            f"emissions at {cap['grid_intensity_g_per_kwh']:g} gCO2e/kWh ({_e(cap['grid_intensity_source'])}).</p>")
    return f"<table>{head}{''.join(rows)}</table>{foot}"


def _summary(data: ReportData) -> str:
    best = data.plans[0]
    est = best["estimate"]
    from ...training.plan import plan_from_fields
    from ..tables import settings_text

    try:
        plan = plan_from_fields(best["plan"], int(data.inputs["gpus"]))
        name = f"{plan.layout()} with {settings_text(plan)}"
    except (ValueError, KeyError, TypeError):
        name = ", ".join(f"{k}={v}" for k, v in best["plan"].items())
    if "measured_tokens_per_s_per_gpu" in best:
        text = (f"Best measured plan: {_e(name)}: {best['measured_tokens_per_s_per_gpu']:,.0f} tokens/s per GPU "
                f"measured (trial {best['trial']}). The cost model predicts "
                f"{est['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU (MFU {est['mfu']:.0%}), "
                f"{est['memory_gib_per_gpu']:.1f} of {data.capacity_gib:g} GiB per GPU, step {est['step_time_s']:.2f} s.")
    else:
        text = (f"Best plan: {_e(name)}: "
                f"{est['tokens_per_s_per_gpu']:,.0f} tokens/s per GPU (MFU {est['mfu']:.0%}), "
                f"{est['memory_gib_per_gpu']:.1f} of {data.capacity_gib:g} GiB per GPU, step {est['step_time_s']:.2f} s.")
    if "training_days" in est:
        text += (f" Training the budget: {est['training_days']:,.1f} days, {est['gpu_hours']:,.0f} GPU-hours, "
                 f"${est['cost_usd']:,.0f}.")
    s = data.search
    where = f"study {_e(data.study)}, " if data.study else ""
    evaluations = s.get("evaluations", 0)
    if data.measured is not None:
        # a tune study: its runs, and the distinct plans its completed runs measured (a plan may run more than once,
        # a failed run completes none), said as such: "4 plans evaluated" beside "6 benchmark runs" read as a miscount
        ok = sum(1 for r in data.measured if r["outcome"] == "ok")
        looked = (f"{len(data.measured):,} benchmark run{'s' if len(data.measured) != 1 else ''} ({ok:,} succeeded), "
                  f"completing {evaluations:,} distinct plan{'s' if evaluations != 1 else ''}")
    else:
        looked = f"{evaluations:,} plans evaluated"
    text += (f"<br><span class=note>{where}{_e(s.get('sampler', '?'))} search: {looked} of a space of "
             f"{s.get('space_size', 0):,}; {s.get('feasible', 0):,} fit.</span>")
    return f"<p class=summary>{text}</p>"


def render(data: ReportData, figures: list[Figure]) -> str:
    parts = [
        "<!DOCTYPE html><html lang=en><head><meta charset=utf-8>",
        '<meta name=viewport content="width=device-width, initial-scale=1">',
        f"<title>autotune report: {_e(data.title)}</title><style>{_CSS}</style></head><body>",
        f"<h1>autotune report</h1><p class=sub>{_e(data.title)}</p>",
        _summary(data),
    ]
    if data.capacity:
        parts.append("<h2>Capacity plan</h2>" + _capacity_table(data.capacity))
    parts.append("<h2>Top plans</h2>" + _plans_table(data))
    if data.measured:
        parts.append("<h2>Measured trials</h2>" + _measured_table(data))
    for fig in figures:
        uri = "data:image/png;base64," + base64.b64encode(fig.png).decode("ascii")
        parts.append(f"<h2>{_e(fig.title)}</h2><figure id={fig.name}><img src=\"{uri}\" alt=\"{_e(fig.title)}\">"
                     f"<figcaption>{_e(fig.caption)} <span class=note>(also {fig.name}.png)</span></figcaption></figure>")
    for note in data.notes:
        parts.append(f"<p class=note>{_e(note)}</p>")
    parts.append("<p class=note>Estimates come from autotune's analytic cost model; `autotune validate` reports its "
                 "measured error.</p>")
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts)
