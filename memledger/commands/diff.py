"""`memledger diff A B [--json]`: peak, per-category and per-module differences."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from memledger.commands.common import console, open_ledger, print_json


def diff(
    before: Annotated[Path, typer.Argument(help="the ledger to compare from (A)")],
    after: Annotated[Path, typer.Argument(help="the ledger to compare to (B)")],
    json_: Annotated[bool, typer.Option("--json", help="print memledger.diff/1 JSON")] = False,
    top: Annotated[int, typer.Option(min=1, help="rows in the module and tensor tables")] = 10,
) -> None:
    """What grew from A to B at the peak: by category, by module, and the tensors."""
    from memledger.report.diff import diff_ledgers
    from memledger.report.diff_terminal import print_diff

    from memledger.ledger.ranks import find_rank_files

    if find_rank_files(before) or find_rank_files(after):   # rank by rank (`trace --nproc`)
        from memledger.commands.ranks import diff_ranks

        diff_ranks(before, after, json_, top)
        return
    d = diff_ledgers(open_ledger(before), open_ledger(after), str(before), str(after), top)
    if json_:
        print_json(d.to_json_dict())
    else:
        print_diff(d, console)
