"""The ledgers of one distributed run: one file per rank, named after the one the user asked for.

`memledger trace --nproc 2 train.py -o run.ledger` writes `run.rank0.ledger` and
`run.rank1.ledger`; `memledger show run.ledger` finds them. No torch here.
"""

from __future__ import annotations

import re
from pathlib import Path

from memledger.errors import LedgerFormatError


def rank_file(out: str | Path, rank: int) -> Path:
    """`run.ledger`, 1 -> `run.rank1.ledger` (a name without a suffix: `run` -> `run.rank1`)."""
    p = Path(out)
    return p.with_name(f"{p.stem}.rank{rank}{p.suffix}") if p.suffix else \
        p.with_name(f"{p.name}.rank{rank}")


def rank_file_template(out: str | Path) -> str:
    """The same name with `{rank}` in place of the number, for the per-rank workers."""
    return str(rank_file(out, 0)).replace(".rank0", ".rank{rank}")


def find_rank_files(path: str | Path) -> list[Path]:
    """The per-rank ledgers that `path` names, by rank: [] when there are none.

    `run.ledger` finds `run.rank0.ledger`, `run.rank1.ledger`, ... beside it. A file that
    exists under the name itself is a one-process ledger and wins.
    """
    p = Path(path)
    if p.exists():
        return []
    pattern = re.compile(re.escape(p.stem) + r"\.rank(\d+)" + re.escape(p.suffix) + "$") \
        if p.suffix else re.compile(re.escape(p.name) + r"\.rank(\d+)$")
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        return []
    found = sorted(((int(m.group(1)), f) for f in parent.iterdir()
                    if (m := pattern.match(f.name))), key=lambda t: t[0])
    ranks = [r for r, _ in found]
    if found and ranks != list(range(len(ranks))):
        missing = sorted(set(range(max(ranks) + 1)) - set(ranks))
        raise LedgerFormatError(
            f"{p}: rank ledgers {ranks} found, rank {missing[0]} missing; trace again with "
            f"--nproc or name one rank's ledger")
    return [f for _, f in found]
