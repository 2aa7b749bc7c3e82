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


def worst_rank(summaries: list) -> int:
    """Index of the rank whose peak is highest: the allocator's where measured, else the
    ledger's (the rank that runs out of memory first)."""
    def peak(s) -> int:
        return max(s.measured.peak_bytes, s.peak.bytes)
    return max(range(len(summaries)), key=lambda i: (peak(summaries[i]), -i))


def peak_skew(peaks: list[int]) -> dict[str, int]:
    """How far apart the ranks' peaks are: highest, lowest and highest − lowest."""
    hi, lo = max(peaks, default=0), min(peaks, default=0)
    return {"max_bytes": hi, "min_bytes": lo, "spread_bytes": hi - lo}


def rank_skew(summaries: list) -> dict[str, int | float]:
    """`peak_skew` of the ranks' ledgers, and highest / mean."""
    peaks = [max(s.measured.peak_bytes, s.peak.bytes) for s in summaries]
    mean = sum(peaks) / len(peaks) if peaks else 0
    return {**peak_skew(peaks), "max_over_mean": round(max(peaks) / mean, 4) if mean else 0.0}


def ranks_json(per_rank: list[dict], worst: int, skew: dict) -> dict:
    """Design contract for several ranks: the worst rank's object at top level, every rank's
    under "ranks", plus `worst_rank` and `rank_skew`."""
    return {**per_rank[worst], "worst_rank": worst, "rank_skew": skew, "ranks": per_rank}


def summarize_ranks(paths: list[Path], top: int = 10, summarizer=None) -> tuple[list, int, dict]:
    """(one Summary per rank, the worst rank's index, the skew) for the rank ledgers `paths`;
    `summarizer(path, top)` gives a ledger's summary (default: read the ledger whole)."""
    if summarizer is None:
        from memledger.ledger.model import Ledger

        def summarizer(p: Path, top: int):
            return Ledger.load(p).summary(top=top)
    summaries = [summarizer(p, top) for p in paths]
    return summaries, worst_rank(summaries), rank_skew(summaries)
