"""`memledger show LEDGER`: what is live at the peak, and why."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memledger.commands.common import console, kept_summary, ledger_summary, open_ledger, \
    print_json


def show(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    json_: Annotated[bool, typer.Option("--json", help="print the summary contract as JSON")] =
        False,
    top: Annotated[int, typer.Option(min=1, help="rows in the largest-tensor and idle tables")] = 10,
    timeline: Annotated[bool, typer.Option(
        "--timeline", help="also draw the live-bytes curve as a Unicode chart")] = False,
) -> None:
    """Peak, category breakdown, per-phase peaks, largest tensors, activations, idle memory."""
    from memledger.ledger.ranks import find_rank_files

    if rank_files := find_rank_files(ledger):  # `run.ledger` of `trace --nproc`: every rank
        _show_ranks(ledger, rank_files, json_, top)
        return
    from memledger.doctor.findings import DoctorReport
    from memledger.report.findings import print_findings
    from memledger.report.terminal import print_summary

    # the summary the ledger keeps (never a doctored ledger's: summarize_and_keep), or the
    # ledger read whole
    led = None
    s = None if timeline else kept_summary(ledger, top)
    if s is None:
        led = open_ledger(ledger)
        s = led.summary(top=top)
    doc = DoctorReport.from_ledger_extra(led.extra) if led is not None else None
    if json_:
        print_json({**s.to_json_dict(), **({"doctor": doc.to_json_dict()} if doc else {})})
        return
    print_summary(s, console, source=str(ledger))
    if doc is not None:   # None: the doctor did not run
        console.print()
        print_findings(doc, console)
    if led is not None and timeline:
        from memledger.report.timeline import print_timeline

        console.print()
        print_timeline(led, console)


def _show_ranks(ledger: Path, files: list[Path], json_: bool, top: int) -> None:
    """Every rank's summary: a per-rank table, the worst rank, the skew; then the worst rank."""
    from memledger.ledger.ranks import ranks_json, summarize_ranks
    from memledger.report.ranks_table import print_ranks
    from memledger.report.terminal import print_summary

    summaries, worst, skew = summarize_ranks(files, top, summarizer=ledger_summary)
    if json_:
        print_json(ranks_json([s.to_json_dict() for s in summaries], worst, skew))
        return
    print_ranks(summaries, worst, skew, console)
    console.print()
    print_summary(summaries[worst], console, source=f"{files[worst]} (the worst rank)")
