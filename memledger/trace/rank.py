"""This process's place in a distributed job, for the collector and the workers.

torchrun (`torch.distributed.run`) gives every worker `RANK`, `LOCAL_RANK` and `WORLD_SIZE`
in its environment before the script runs, so the rank is known before the script calls
`init_process_group`; once a process group exists, torch's own answer wins.
"""

from __future__ import annotations

import os
from pathlib import Path


def rank_and_world() -> tuple[int, int] | None:
    """(rank, world size) when this process is one rank of several, else None."""
    try:
        import torch.distributed as dist

        if dist.is_available() and dist.is_initialized():
            return dist.get_rank(), dist.get_world_size()
    except ImportError:  # pragma: no cover - torch built without distributed
        pass
    if "RANK" in os.environ and "WORLD_SIZE" in os.environ:
        return int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    return None


def rank_header() -> dict[str, int]:
    """The ledger header's `rank` and `world_size` (nothing for a single process)."""
    rw = rank_and_world()
    return {"rank": rw[0], "world_size": rw[1]} if rw else {}


def for_rank(path: str | None, rank: int | None = None) -> str | None:
    """`path` with `{rank}` replaced by this rank (the launcher passes templates)."""
    if path is None or "{rank}" not in path:
        return path
    if rank is None:
        rank = int(os.environ.get("RANK", "0"))
    return path.replace("{rank}", str(rank))


def rank_template(out: str | Path) -> str:
    """`run.ledger` -> `run.rank{rank}.ledger`: one ledger per rank beside the name asked for."""
    from memledger.ledger.ranks import rank_file_template

    return rank_file_template(out)
