"""`memledger plan LEDGER --budget 1.5GiB`: the cheapest policy predicted to fit."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from memledger.commands.common import console, open_ledger, print_json
from memledger.errors import CheckFailed
from memledger.units import format_bytes, parse_bytes, parse_duration


def plan(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    budget: Annotated[str, typer.Option(help="peak to fit under, e.g. 1.5GiB or 800MB")],
    json_: Annotated[bool, typer.Option("--json", help="print memledger.plan/1 as JSON")] = False,
    step_time: Annotated[Optional[str], typer.Option(
        help="untraced step time, e.g. 25ms or 1.2s (default: from the ledger)")] = None,
    top: Annotated[int, typer.Option(help="candidates to list")] = 8,
) -> None:
    """Pick the policy that fits BUDGET with the least added step time (exit 1: none fits).

    Candidates (checkpoint, selective, offload and their mixes on the ledger's repeated
    blocks) are judged by replay, as `predict` does."""
    from memledger.replay.plan import plan as make_plan

    budget_bytes = parse_bytes(budget)
    step_time_s = None if step_time is None else parse_duration(step_time)
    report = make_plan(open_ledger(ledger), budget_bytes, step_time_s=step_time_s)
    if json_:
        print_json(report.to_json_dict())
    else:
        _render(report, budget, top)
    if not report.fits:
        raise CheckFailed(f"memledger: no candidate fits {budget} ({budget_bytes:,} bytes); the "
                          f"lowest predicted peak is {format_bytes(report.predicted_peak_bytes)}")


def _render(report, budget: str, top: int) -> None:
    if report.fits:
        console.print(f"[bold green]{report.policy}[/]  predicted peak "
                      f"{format_bytes(report.predicted_peak_bytes)} ≤ {budget}, "
                      f"+{report.predicted_added_time_s * 1e3:.1f} ms per step "
                      f"(baseline {format_bytes(report.baseline_peak_bytes)})")
    t = Table(title=f"Candidates on {len(report.blocks)} blocks, best first", title_justify="left",
              show_edge=False)
    for col in ("policy", "peak", "fits", "added ms/step"):
        t.add_column(col, justify="left" if col == "policy" else "right")
    for c in report.candidates[:top]:
        t.add_row(c.policy, format_bytes(c.peak_bytes),
                  "yes" if c.peak_bytes <= report.budget_bytes else "no",
                  f"{c.added_time_s * 1e3:.1f}")
    console.print(t)
