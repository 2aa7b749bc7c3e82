"""`memledger show` on a distributed run: one row per rank, the worst rank marked, the skew."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from memledger.ledger.summary import Summary
from memledger.units import format_bytes

COLUMNS = ("parameter", "gradient", "optimizer_state", "activation", "communication")
HEADERS = ("param", "grad", "optim", "activ", "comm")   # 80 columns: short names


def short_bytes(n: int) -> str:
    """Binary units in at most 6 characters, for a table of many columns: 3.31M, 463.0K, 624B."""
    for unit, scale in (("T", 2**40), ("G", 2**30), ("M", 2**20), ("K", 2**10)):
        if n >= scale:
            v = n / scale
            return f"{v:.2f}{unit}" if v < 10 else f"{v:.1f}{unit}" if v < 100 else f"{v:.0f}{unit}"
    return f"{n}B"


def ranks_table(summaries: list[Summary], worst: int) -> Table:
    t = Table(title=f"{len(summaries)} ranks at each one's peak (peak: the ledger's, alloc: "
              "the allocator's; the worst rank is marked ◀)", title_justify="left",
              show_edge=False, pad_edge=False, padding=(0, 0, 0, 1))
    for col in ("rank", "peak", "alloc", *HEADERS, "wksp", ""):
        t.add_column(col, justify="left" if col in ("rank", "phase", "") else "right",
                     no_wrap=True)
    for i, s in enumerate(summaries):
        meas = short_bytes(s.measured.peak_bytes) if s.measured.source != "none" else "-"
        t.add_row(str(s.rank if s.rank is not None else i), short_bytes(s.peak.bytes), meas,
                  *(short_bytes(s.at_peak.get(c, 0)) for c in COLUMNS),
                  short_bytes(s.at_peak.get("workspace", 0)), "◀" if i == worst else "",
                  style="bold" if i == worst else None)
    return t


def print_ranks(summaries: list[Summary], worst: int, skew: dict, console: Console) -> None:
    console.print(ranks_table(summaries, worst))
    console.print(f"rank skew: highest peak {format_bytes(skew['max_bytes'])}, lowest "
                  f"{format_bytes(skew['min_bytes'])} (spread {skew['spread_bytes']:,} B, "
                  f"highest / mean {skew['max_over_mean']:.3f})", highlight=False)
    s = summaries[worst]
    shards = ", ".join(f"{k} {format_bytes(v)}" for k, v in sorted(s.parameter_shards.items()))
    if shards:
        console.print(f"rank {worst} parameters at its peak: {shards}", highlight=False)
    coll = s.measured.collective_at_peak_bytes or 0
    if coll:
        console.print(f"rank {worst}: {coll:,} B of its allocator peak are the collectives' own "
                      "buffers (gloo), which the dispatcher never sees (Note [Collective "
                      "scratch])", style="dim", highlight=False)
