"""`memledger report`: one self-contained HTML file with the memory timeline.

The page is static HTML for the tables (readable even with scripts off) plus an inline SVG
renderer for the chart (`html_assets.JS`) that reads the JSON of `html_data.report_data`.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path

from memledger.outputs import write_atomic
from memledger.ledger.model import Ledger
from memledger.report.html_assets import CSS, JS
from memledger.report.html_data import MAX_POINTS, report_data
from memledger.units import count, format_bytes


def _json_for_script(data: dict) -> str:
    # Module names are the script's: `</script>` would end the element early and `<!--`
    # would put the parser in a comment state. JSON may write any character as \uXXXX, so
    # <, > and & never appear raw inside the <script> (and U+2028/9 never break a line).
    return (json.dumps(data, separators=(",", ":")).replace("<", "\\u003c")
            .replace(">", "\\u003e").replace("&", "\\u0026")
            .replace("\u2028", "\\u2028").replace("\u2029", "\\u2029"))


NUM_TD = '<td class="num">'


def _table(head: list[str], rows: list[list[str]], num: set[int]) -> str:
    out = ["<table><tr>" + "".join(f"<th>{escape(h)}</th>" for h in head) + "</tr>"]
    for r in rows:
        out.append("<tr>" + "".join(
            (NUM_TD if i in num else "<td>") + escape(str(v)) + "</td>"
            for i, v in enumerate(r)) + "</tr>")
    return "".join(out) + "</table>"


def render_html(led: Ledger, source: str = "", max_points: int = MAX_POINTS) -> str:
    from memledger.doctor.findings import DoctorReport
    from memledger.report.findings import findings_html

    d = report_data(led, source, max_points)
    doc = DoctorReport.from_ledger_extra(led.extra)
    pk, meas = d["peak"], d["measured"]
    total = sum(d["at_peak"].values())
    sub = (f"device {d['device']} · {count(d['steps_traced'], 'step')} traced · "
           f"{d['n_events']:,} events" + ("" if d["complete"] else " · INCOMPLETE run"))
    lead = (f"Peak <b>{escape(pk['human'])}</b> ({pk['bytes']:,} B) at step {pk['step']}, "
            f"{escape(pk['phase'])}, op {escape(pk['op'] or '-')} in "
            f"{escape(pk['module'] or '(script)')}")
    if meas:
        lead += (f"; allocator peak <b>{escape(meas['human'])}</b> ({meas['peak_bytes']:,} B, "
                 f"{escape(meas['source'])})")
    notes = "".join(f'<li{" class=warn" if n.startswith("Warning") else ""}>{escape(n)}</li>'
                    for n in d["notes"])
    cats = _table(["category", "bytes", "", "share"],
                  [[c, f"{b:,}", format_bytes(b), f"{100 * b / total:.1f}%" if total else "-"]
                   for c, b in d["at_peak"].items() if b], {1, 2, 3})
    phases = _table(["phase", "peak"], [[p, format_bytes(b)] for p, b in
                                        d["by_phase_peak"].items()], {1})
    idle = _table(["bytes", "category", "module", "shape", "what", "storages",
                   "idle events", "bytes × idle events"],
                  [[r["human"], r["category"], r["module"] or "(script)", r["shape"],
                    r["name"] or r["op"], r["count"], f"{r['idle_events']:,}",
                    f"{r['idle_byte_events']:,}"] for r in d["idle"]], {0, 5, 6, 7})
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>memledger · {escape(d['title'])}</title>
<style>{CSS}</style></head>
<body>
<h1>memledger · {escape(d['title'])}</h1>
<div class="dim">{escape(sub)}</div>
<p>{lead}</p>
{f'<ul id="ml-notes">{notes}</ul>' if notes else ''}
{findings_html(doc) if doc is not None else ''}
<div id="ml-legend"></div>
<div id="ml-chart-wrap"><div id="ml-tip"></div></div>
<div id="ml-peak-panel"></div>
<div id="ml-at-panel"></div>
<div class="dim">Stacked: live bytes by category after each event (each drawn point is the
highest event of its bucket, so the peak is exact). Bands: phases. Dashed verticals: ends of
optimizer steps. Dashed horizontal: the allocator's own peak. Hover for the op and module;
click a point for the tensors live there; wheel to zoom, drag to pan, double-click or
<button id="ml-reset" type="button">reset zoom</button> for the whole run; click a legend
entry to hide or show its category. Hover or click the peak.</div>
<div id="ml-selftest"></div>
<h2>At the peak</h2>{cats}
<h2>Peak by phase</h2>{phases}
<h2>Saved for backward: {escape(format_bytes(d['activations']['saved_bytes']))}
(live just before backward), by module</h2>
<table id="ml-activations"></table>
<h2>Idle residency: held after last use (the same tensor of each step folded)</h2>{idle if d['idle'] else '<p class="dim">none</p>'}
<div id="ml-status" data-status="pending"></div>
<script type="application/json" id="ml-data">{_json_for_script(d)}</script>
<script>{JS}</script>
</body></html>
"""


def write_html(led: Ledger, out: str | Path, source: str = "",
               max_points: int = MAX_POINTS) -> Path:
    return write_atomic(out, render_html(led, source, max_points), "report")
