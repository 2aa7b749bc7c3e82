"""`memledger report run.ledger` on a distributed run: one page per rank plus an index page
with the per-rank table, the worst rank and the skew (links to each rank's page)."""

from __future__ import annotations

from html import escape
from pathlib import Path

from memledger.errors import MemledgerError
from memledger.ledger.ranks import rank_file
from memledger.report.ranks_table import COLUMNS
from memledger.units import format_bytes


def write_rank_reports(ledgers: list, summaries: list, worst: int, skew: dict, out: Path,
                       source: str, max_points: int) -> list[Path]:
    """report.html (the index) and report.rank{r}.html (one per rank); returns them all."""
    from memledger.report.html import write_html

    pages = [write_html(led, rank_file(out, r), source=f"{source} rank {r}",
                        max_points=max_points) for r, led in enumerate(ledgers)]
    head = "".join(f"<th>{escape(h)}</th>" for h in
                   ("rank", "ledger peak", "allocator peak", "phase", *COLUMNS, "workspace"))
    rows = []
    for r, s in enumerate(summaries):
        meas = format_bytes(s.measured.peak_bytes) if s.measured.source != "none" else "-"
        cells = [f'<a href="{escape(pages[r].name)}">rank {r}</a>' + (" ◀ worst" if r == worst
                                                                       else ""),
                 format_bytes(s.peak.bytes), meas, escape(s.peak.phase),
                 *(format_bytes(s.at_peak.get(c, 0)) for c in COLUMNS),
                 format_bytes(s.at_peak.get("workspace", 0))]
        rows.append("<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>")
    page = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>memledger · {escape(source)} ·
{len(summaries)} ranks</title>
<style>body{{font-family:system-ui,sans-serif;margin:2em}}td,th{{padding:.2em .8em;
text-align:right}}td:first-child,th:first-child{{text-align:left}}</style></head><body>
<h1>memledger · {escape(source)} · {len(summaries)} ranks</h1>
<p>The worst rank is <a href="{escape(pages[worst].name)}">rank {worst}</a>: peak
{escape(format_bytes(skew['max_bytes']))}; the lowest rank's is
{escape(format_bytes(skew['min_bytes']))} (spread {skew['spread_bytes']:,} B, highest / mean
{skew['max_over_mean']:.3f}). Each rank at its own peak:</p>
<table><tr>{head}</tr>{''.join(rows)}</table></body></html>
"""
    try:
        out.write_text(page, encoding="utf-8")
    except OSError as e:
        raise MemledgerError(f"cannot write report {str(out)!r}: {e.strerror}; "
                             "pick another -o path") from None
    return [out, *pages]
