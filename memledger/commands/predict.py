"""`memledger predict LEDGER --policy P [--policy Q ...]`: replay the ledger under policies."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.table import Table

from memledger.commands.common import console, open_ledger, print_json
from memledger.errors import PolicyError
from memledger.replay.policies import policies_from_args
from memledger.replay.predict import predict as predict_policies
from memledger.units import format_bytes, format_signed_bytes


def predict(
    ledger: Annotated[Path, typer.Argument(help="a ledger written by `memledger trace`")],
    policy: Annotated[Optional[list[str]], typer.Option(
        "--policy", "-p", help="'kind:selector[:options]' joined by '+', or a .toml file; "
        "repeat for several")] = None,
    json_: Annotated[bool, typer.Option("--json", help="print memledger.predict/1 JSON")] = False,
    step_time: Annotated[Optional[float], typer.Option(
        help="untraced baseline step time in seconds (scales traced recompute times)")] = None,
    bandwidth: Annotated[Optional[float], typer.Option(
        help="offload copy bandwidth in bytes/s (default: measured on this machine)")] = None,
) -> None:
    """Predicted peak, its breakdown and added step time for each policy, from the ledger."""
    if not policy:
        raise PolicyError("predict needs at least one --policy, e.g. --policy 'checkpoint:blocks.*'")
    pols = policies_from_args(policy)
    rep = predict_policies(open_ledger(ledger), pols, step_time_s=step_time, bandwidth=bandwidth)
    if json_:
        print_json(rep.to_json_dict())
        return
    t = Table(title=f"{ledger}: baseline peak {format_bytes(rep.baseline_peak_bytes)}")
    for col in ("policy", "peak", "saving", "added/step", "peak at", "activation", "top category"):
        t.add_column(col, justify="left" if col in ("policy", "peak at") else "right")
    for p in rep.policies:
        where = f"step {p.peak_step} {p.peak_phase}"
        if p.peak_in_recompute:
            where += f" (recompute {p.peak_in_recompute})"
        top = max(p.at_peak.items(), key=lambda kv: kv[1])
        added = f"{p.added_time_s * 1e3:.1f} ms"
        if p.transfer_s:
            added += f" ({p.transfer_s * 1e3:.1f} copy)"
        t.add_row(p.policy, format_bytes(p.peak_bytes), format_signed_bytes(-p.saving_bytes),
                  added, where, format_bytes(p.at_peak.get("activation", 0)),
                  f"{top[0]} {format_bytes(top[1])}")
    console.print(t)
    if not rep.untraced_step_time_s:
        console.print("added time from traced times, tracing overhead included (an upper "
                      "bound); pass --step-time "
                      "with the untraced step time from `memledger measure ... --policy none`",
                      style="dim")
