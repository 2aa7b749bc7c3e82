"""`memledger compare --html`: one self-contained page (inline CSS and SVG, no scripts, no
network) with the verdict table, peak by category per policy, and the memory–time trade-off.

- Bars: the predicted bytes per category at each policy's peak (the baseline's from its
  ledger), stacked, with the measured peak drawn as a black tick on the same axis, so the
  prediction error is visible as the gap between the bar's top and the tick.
- Scatter: measured added step time (x) against measured peak (y), one dot per policy that
  passed the gates, the baseline at x = 0; down and left is better. Behind the dots, plan's
  Pareto front on the baseline ledger (predicted: the least added time at each peak over
  every per-block mix, memledger/replay/plan.py) as a dashed step line with hollow points.
"""

from __future__ import annotations

import html
from pathlib import Path

from memledger.ledger.schema import CATEGORIES
from memledger.outputs import write_atomic
from memledger.report.compare_table import steps_compared
from memledger.report.palette import category_hex
from memledger.units import format_bytes, format_error
from memledger.verify.verdict import CompareReport

W, H, PAD = 640, 260, 48          # px: chart width, height, left/bottom margin
VERDICT_COLOR = {"ADOPT": "#2e7d32", "OK": "#558b2f", "REJECT": "#c62828"}

# The page fits its window: the table scrolls inside its own box (12 columns do not fit a
# laptop's width), policy names and reasons wrap, the charts scale down with the window.
CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:24px;color:#222;max-width:980px}
.scroll{overflow-x:auto;max-width:100%}
table{border-collapse:collapse;margin:12px 0}td,th{padding:4px 8px;border-bottom:1px solid #ddd}
th{text-align:left;background:#f4f4f4}td.n{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}
td.pol{overflow-wrap:anywhere;min-width:9em}td.why{min-width:14em}
.ok{color:#2e7d32}.bad{color:#c62828;font-weight:bold}.dim{color:#888}.warn{color:#8a5a00}
.legend span{display:inline-block;margin-right:12px}.sw{width:10px;height:10px;display:inline-block;
margin-right:4px}svg{max-width:100%;height:auto}svg text{font:11px system-ui,sans-serif}
"""
TICKS = 4   # y-axis ticks above zero on both charts


def _y_ticks(top: float, y_of, x_axis: int) -> list[str]:
    """Gridlines and labels at 0, 1/4, ... of `top` bytes, labels right-aligned left of the
    axis at x = `x_axis`."""
    out = []
    for i in range(TICKS + 1):
        b = top * i / TICKS
        y = y_of(b)
        out.append(f'<line class="tick" x1="{x_axis}" y1="{y:.1f}" x2="{W}" y2="{y:.1f}" '
                   f'stroke="#eee"/><text x="{x_axis - 4}" y="{y + 4:.1f}" '
                   f'text-anchor="end">{_e(format_bytes(int(b)))}</text>')
    return out


def _e(s: object) -> str:
    return html.escape(str(s), quote=True)


def _mark(ok: bool) -> str:
    return '<span class="ok">✓</span>' if ok else '<span class="bad">✗</span>'


def _table(rep: CompareReport) -> str:
    head = ["policy", "verdict", "inputs", "gradients", "update", "measured peak", "saved",
            "predicted peak", "error", "added time", "predicted added", "reason"]
    rows = []
    if rep.performance:
        b = rep.baseline
        rows.append('<tr class="dim"><td>none (baseline)</td><td></td><td></td><td></td><td></td>'
                    f'<td class="n">{_e(format_bytes(b["measured_peak_bytes"]))}</td><td></td>'
                    f'<td class="n">{_e(format_bytes(b["predicted_peak_bytes"]))}</td><td></td>'
                    f'<td class="n">{b["measured_step_time_s"] * 1e3:.1f} ms/step</td>'
                    '<td></td><td></td></tr>')
    for p in rep.policies:
        measured = rep.performance and p.verdict != "REJECT"
        err = (format_error(p.peak_prediction_error) if p.peak_prediction_error is not None
               else "–")
        cells = [
            _e(p.policy),
            f'<b style="color:{VERDICT_COLOR[p.verdict]}">{p.verdict}</b>',
            _mark(p.gates.inputs), _mark(p.gates.gradients), _mark(p.gates.update),
            _e(format_bytes(p.measured_peak_bytes)) if measured else "–",
            _e(format_bytes(p.saving_bytes)) if measured else "–",
            _e(format_bytes(p.predicted_peak_bytes)) if p.predicted_peak_bytes else "–",
            err if measured else "–",
            _measured_added(p) if measured else "–",
            f"{p.predicted_added_time_s * 1e3:+.1f} ms" if p.predicted_peak_bytes else "–",
            _e(p.reason),
        ]
        rows.append("<tr>" + "".join(
            f'<td class="n">{c}</td>' if 5 <= i <= 10 else
            (f'<td class="why">{c}</td>' if i == 11 else
             f'<td class="pol">{c}</td>' if i == 0 else f"<td>{c}</td>")
            for i, c in enumerate(cells)) + "</tr>")
    return ('<div class="scroll"><table><tr>' + "".join(f"<th>{h}</th>" for h in head)
            + "</tr>" + "".join(rows) + "</table></div>")


def _bars(rep: CompareReport) -> str:
    """Stacked bars of predicted bytes by category at the peak; measured peak as a tick."""
    items = [("none (baseline)", rep.baseline.get("at_peak", {}),
              rep.baseline.get("measured_peak_bytes", 0))]
    items += [(p.policy, p.at_peak, p.measured_peak_bytes if p.verdict != "REJECT" else 0)
              for p in rep.policies if p.at_peak]
    top = max([sum(a.values()) for _, a, _ in items] + [m for _, _, m in items] + [1])
    left = PAD + 24   # room for the tick labels ("1023.9 MiB")
    bw = min(80, (W - left) // max(len(items), 1) - 16)
    below = 110        # room for the policy names, turned 40 degrees
    out = [f'<svg width="{W}" height="{H + below}" viewBox="0 0 {W} {H + below}" role="img" '
           'aria-label="peak by category">',
           *_y_ticks(top, lambda b: H - (H - 20) * b / top, left),
           f'<line x1="{left}" y1="{H}" x2="{W}" y2="{H}" stroke="#999"/>',
           f'<line x1="{left}" y1="10" x2="{left}" y2="{H}" stroke="#999"/>']
    for i, (label, at_peak, measured) in enumerate(items):
        x = left + 8 + i * (bw + 16)
        y = H
        for cat in CATEGORIES:
            b = at_peak.get(cat, 0)
            if b <= 0:
                continue
            h = (H - 20) * b / top
            y -= h
            out.append(f'<rect x="{x}" y="{y:.1f}" width="{bw}" height="{h:.1f}" '
                       f'fill="{category_hex(cat)}"><title>{_e(label)}: {_e(cat)} '
                       f'{_e(format_bytes(b))}</title></rect>')
        if measured:
            ym = H - (H - 20) * measured / top
            out.append(f'<line x1="{x - 4}" y1="{ym:.1f}" x2="{x + bw + 4}" y2="{ym:.1f}" '
                       f'stroke="#000" stroke-width="2"><title>measured '
                       f'{_e(format_bytes(measured))}</title></line>')
        cx = x + bw / 2   # the whole name, turned so neighbours never overlap
        out.append(f'<text class="label" x="{cx:.1f}" y="{H + 14}" text-anchor="end" '
                   f'transform="rotate(-40 {cx:.1f} {H + 14})">{_e(label)}</text>')
    out.append("</svg>")
    legend = "".join(f'<span><i class="sw" style="background:{category_hex(c)}"></i>{c}</span>'
                     for c in CATEGORIES)
    return ('<div class="legend">' + legend + ' <span>▬ measured peak</span></div>'
            + "".join(out))


def _scatter(rep: CompareReport) -> str:
    """Measured added time (x) vs measured peak (y) of each policy that passed."""
    pts = [("none (baseline)", 0.0, rep.baseline.get("measured_peak_bytes", 0), "#555")]
    pts += [(p.policy, p.measured_added_time_s, p.measured_peak_bytes,
             VERDICT_COLOR[p.verdict]) for p in rep.policies if p.verdict != "REJECT"]
    front = [(f["policy"], f["added_time_s"], f["peak_bytes"]) for f in rep.front]
    xs = [x for _, x, _, _ in pts] + [x for _, x, _ in front]
    x0, x1 = min(xs + [0.0]), max(xs + [1e-3])
    ytop = max([y for _, _, y, _ in pts] + [y for _, _, y in front] + [1])
    left = PAD + 24

    def at(x: float, y: float) -> tuple[float, float]:
        return left + 10 + (W - left - 60) * (x - x0) / ((x1 - x0) or 1), H - (H - 20) * y / ytop

    out = [f'<svg width="{W}" height="{H + 30}" viewBox="0 0 {W} {H + 30}" role="img" '
           'aria-label="memory-time trade-off">',
           *_y_ticks(ytop, lambda b: at(0, b)[1], left),
           f'<line x1="{left}" y1="{H}" x2="{W}" y2="{H}" stroke="#999"/>',
           f'<line x1="{left}" y1="10" x2="{left}" y2="{H}" stroke="#999"/>',
           f'<text x="{W - 190}" y="{H + 26}">added step time (ms) →</text>']
    for i in range(TICKS + 1):   # x ticks
        xv = x0 + (x1 - x0) * i / TICKS
        px = at(xv, 0)[0]
        out.append(f'<line x1="{px:.1f}" y1="{H}" x2="{px:.1f}" y2="{H + 4}" stroke="#999"/>'
                   f'<text x="{px:.1f}" y="{H + 15}" text-anchor="middle">{xv * 1e3:+.1f}'
                   '</text>')

    if front:
        line = " ".join(f"{at(x, y)[0]:.1f},{at(x, y)[1]:.1f}" for _, x, y in
                        sorted(front, key=lambda f: f[1]))
        out.append(f'<polyline points="{line}" fill="none" stroke="#1565c0" '
                   'stroke-dasharray="4 3"><title>Pareto front (predicted)</title></polyline>')
        for label, x, y in front:
            px, py = at(x, y)
            out.append(f'<circle class="front" cx="{px:.1f}" cy="{py:.1f}" r="3" fill="#fff" '
                       f'stroke="#1565c0"><title>front: {_e(label)}: {_e(format_bytes(y))}, '
                       f'{x * 1e3:+.1f} ms (predicted)</title></circle>')
        out.append(f'<text x="{W - 190}" y="24" fill="#1565c0">- - Pareto front (plan, '
                   'predicted)</text>')
    for label, x, y, color in pts:
        px, py = at(x, y)
        out.append(f'<circle cx="{px:.1f}" cy="{py:.1f}" r="5" fill="{color}"><title>'
                   f'{_e(label)}: {_e(format_bytes(y))}, {x * 1e3:+.1f} ms</title></circle>')
        right = px + 8 + 6.5 * len(label) > W   # ~6.5 px a character at 11 px: turn left
        anchor = ' text-anchor="end"' if right else ""
        out.append(f'<text class="label" x="{px - 8 if right else px + 8:.1f}" '
                   f'y="{max(py - 6, 12):.1f}"{anchor}>{_e(label)}</text>')
    out.append("</svg>")
    return "".join(out)


def render_compare_html(rep: CompareReport) -> str:
    parts = [f"<!doctype html><html><head><meta charset='utf-8'><title>memledger compare: "
             f"{_e(rep.script)}</title><style>{CSS}</style></head><body>",
             f"<h1>memledger compare: {_e(rep.script)}</h1>",
             f"<p>{steps_compared(rep.steps, rep.steps_by)} compared on {_e(rep.device)}; "
             f"gradients and state "
             f"{_e(rep.tolerance)}; baseline reproducible: {'yes' if rep.reproducible else 'no'}"
             f"{'; noise floor ' + format(rep.noise_floor, '.2g') if rep.noise_floor else ''}"
             f".</p>"]
    if rep.note:
        parts.append(f"<p><b>Note:</b> {_e(rep.note)}</p>")
    parts += [f'<p class="warn"><b>Not judged:</b> {_e(line)}</p>' for line in rep.errors]
    if rep.frozen_changed:
        parts.append("<p><b>Note:</b> frozen parameters that the optimizer step changes (in "
                     f"the baseline too): {_e(', '.join(rep.frozen_changed))}</p>")
    parts.append(_table(rep))
    parts += [f'<p class="warn">{_e(line)}</p>' for line in rep.time_caveats]
    if rep.performance:
        parts += ["<h2>Peak by category (predicted) and measured peak</h2>", _bars(rep),
                  "<h2>Memory–time trade-off (measured)</h2>", _scatter(rep)]
    else:
        parts.append('<p class="dim">Performance was not measured (gates only, or no policy '
                     "passed).</p>")
    parts.append("</body></html>")
    return "\n".join(parts)


def write_compare_html(rep: CompareReport, out: str | Path) -> Path:
    return write_atomic(out, render_compare_html(rep), "HTML report")


def _measured_added(p) -> str:
    """The measured +ms cell: its 90 % interval on hover, and `?` where that interval is
    wider than +-15 % (too noisy to judge the prediction: memledger/measure/interval.py)."""
    text = f"{p.measured_added_time_s * 1e3:+.1f} ms"
    if not p.measured_added_interval_s:
        return text + ("?" if p.measured_added_resolved is False else "")
    lo, hi = p.measured_added_interval_s
    rough = p.measured_added_resolved is False
    title = f"90 % interval {lo * 1e3:+.1f} to {hi * 1e3:+.1f} ms" + \
        (": too noisy to judge the prediction" if rough else "")
    return f'<span title="{_e(title)}">{text}{"?" if rough else ""}</span>'
