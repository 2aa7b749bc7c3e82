"""`memledger import SNAPSHOT -o run.ledger`: a CUDA memory snapshot as a ledger."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer

from memledger.commands.common import console, err_console


def import_(
    snapshot: Annotated[Path, typer.Argument(
        help="a pickle written by torch.cuda.memory._dump_snapshot (loaded as plain data only)")],
    output: Annotated[Path, typer.Option("-o", "--output", help="ledger file to write")] =
        Path("snapshot.ledger"),
    device: Annotated[Optional[int], typer.Option(
        help="CUDA device index to import (default: the one with the most trace entries)")] =
        None,
) -> None:
    """Convert allocator events (alloc/free/segments/oom) into a ledger with the allocator view."""
    from memledger.importers.cuda_snapshot import import_snapshot

    out = import_snapshot(snapshot, output, device)
    console.print(f"{out}: imported {snapshot}", markup=False)
    err_console.print(f"next: memledger show {out}  (or memledger report {out})", style="dim",
                      markup=False)
