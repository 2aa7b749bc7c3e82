"""`memledger report LEDGER -o report.html`: the memory timeline as one self-contained page."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memledger.commands.common import console, err_console, open_ledger
from memledger.outputs import check_output
from memledger.report.defaults import MAX_POINTS


def report(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    output: Annotated[Path, typer.Option("-o", "--output", help="HTML file to write")] =
        Path("report.html"),
    max_points: Annotated[int, typer.Option(
        min=10, help="most events drawn on the curve (per-bucket maximum; the peak is kept)")] =
        MAX_POINTS,
) -> None:
    """Write an HTML page: stacked timeline by category, phases, steps, the peak explained."""
    check_output(output, "report", inputs=[ledger])
    from memledger.ledger.ranks import find_rank_files
    from memledger.report.html import write_html

    if files := find_rank_files(ledger):   # `trace --nproc`: an index page and one per rank
        from memledger.commands.ranks import report_ranks

        report_ranks(ledger, files, output, max_points)
        return
    led = open_ledger(ledger)
    out = write_html(led, output, source=ledger.name, max_points=max_points)
    console.print(f"{out}: report of {ledger} ({led.n_events:,} events)", markup=False)
    err_console.print(f"open it in a browser (works offline); {out}#peak opens the peak panel",
                      style="dim", markup=False)
