"""`memledger show --timeline`: the live-bytes curve as a compact Unicode chart.

    40.3 MiB ┤      ▼ peak 40.3 MiB at event 2016 (step 2, loss)
             │   ▄██▆        ▄███▆
             │  ████▇▃     ▂██████▃
         0 B └──┴────────────┴─────
               sFFFLBBBOO  FFFLBBBOO

Each column is one bucket of events drawn at its highest total (Note [Downsampling keeps the
per-bucket maximum]); each cell takes the colour of the category that fills most of it, the top
cell of a column is an eighth block. `┴` marks the end of an optimizer step; the strip below
gives the phase of each column (F forward, L loss, B backward, O optimizer, z zero_grad,
s setup, · other).
"""

from __future__ import annotations

import numpy as np
from rich.console import Console, Group
from rich.text import Text

from memledger.ledger.model import Ledger
from memledger.report.downsample import bucket_argmax
from memledger.report.palette import category_style, phase_style
from memledger.units import format_bytes

EIGHTHS = " ▁▂▃▄▅▆▇█"
LABEL_W = 10  # y-axis label column: "40.3 MiB " + axis char


def render_timeline(led: Ledger, width: int = 80, height: int = 8) -> Group:
    """The chart as a Rich renderable `width` characters wide and about `height` + 4 lines."""
    if width < LABEL_W + 8:
        raise ValueError(f"timeline width must be >= {LABEL_W + 8}, got {width!r}")
    if height < 2:
        raise ValueError(f"timeline height must be >= 2, got {height!r}")
    cats = led.curve_by_category()
    names = list(cats.columns)
    values = cats.to_numpy(dtype=np.int64)              # (n_events, n_categories)
    total = values.sum(axis=1)
    keep = bucket_argmax(total, width - LABEL_W)
    n = len(total)
    size = -(-n // len(keep)) if len(keep) else 1       # events per column
    pk = led.peak()
    top = max(int(total.max()) if n else 0, 1)
    unit = top / height                                 # bytes per row of cells

    rows = [Text(" " * (LABEL_W - 1) + "│") for _ in range(height)]
    rows[0] = Text(f"{format_bytes(top):>{LABEL_W - 2}} ┤")
    for col, ev in enumerate(keep):
        stack = np.cumsum(values[ev])                   # top of each category's band
        for r in range(height):                         # r = 0 is the bottom row
            lo, hi = r * unit, (r + 1) * unit
            line = rows[height - 1 - r]
            if stack[-1] >= hi:
                mid = (lo + hi) / 2
                cat = names[int(np.searchsorted(stack, mid, side="right"))]
                line.append("█", style=category_style(cat))
            elif stack[-1] > lo:
                eighths = max(1, int(round(8 * (stack[-1] - lo) / unit)))
                cat = names[int(np.searchsorted(stack, stack[-1] - 1, side="right"))]
                line.append(EIGHTHS[min(eighths, 8)], style=category_style(cat))
            else:
                line.append(" ")

    peak_col = int(pk.event // size)
    label = f"peak {format_bytes(pk.bytes)} at event {pk.event} (step {pk.step}, {pk.phase})"
    at = LABEL_W + peak_col
    if at + 2 + len(label) <= width or at < len(label) + 1:    # label right of the marker
        marker = Text(" " * at)
        marker.append("▼", style="bold")
        marker.append(" " + label)
    else:                                                       # near the right edge: left
        marker = Text(" " * (at - len(label) - 1) + label + " ")
        marker.append("▼", style="bold")

    axis = Text(f"{'0 B':>{LABEL_W - 2}} └")
    ticks = {int(ev) // size for ev in led.steps["ev"]} if len(led.steps) else set()
    axis.append("".join("┴" if c in ticks else "─" for c in range(len(keep))))
    phase, _, _ = led.reported_phase_of_events()   # Note [A backward pass outside the step]
    strip = Text(" " * LABEL_W)
    for ev in keep:
        _, style, mark = phase_style(str(phase[ev]))
        strip.append(mark, style=style)

    legends = [Text(" " * LABEL_W)]
    for c, name in enumerate(names):
        if values[:, c].any():
            if legends[-1].cell_len + len(name) + 4 > width:   # wrap under the chart
                legends.append(Text(" " * LABEL_W))
            legends[-1].append("█ ", style=category_style(name))
            legends[-1].append(f"{name}  ")
    head = Text(f"Live bytes over {n:,} event{'s' * (n != 1)} ({size:,} per column, "
                "the highest shown)",
                style="dim")
    # the chart's lines are drawn to the width and cropped; the heading is a sentence and
    # wraps at a space instead (cropped at 60 columns it lost "the highest shown)")
    for t in (marker, *rows, axis, strip, *legends):
        t.rstrip()
        t.no_wrap, t.overflow = True, "crop"
    return Group(head, marker, *rows, axis, strip, *legends)


def print_timeline(led: Ledger, console: Console, height: int = 8) -> None:
    console.print(render_timeline(led, width=console.width, height=height))
