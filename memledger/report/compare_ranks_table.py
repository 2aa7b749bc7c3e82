"""`memledger compare --nproc N`: every rank of every policy, under the job's table.

    policy               rank gradients predicted peak measured peak
    none (baseline)         0           3.7 MiB        3.7 MiB
                            1           3.7 MiB        3.7 MiB ◀ worst
    checkpoint:blocks.*     0 ✓         3.2 MiB        3.2 MiB
                            1 ✓         3.2 MiB        3.2 MiB ◀ worst
"""

from __future__ import annotations

from rich import box
from rich.table import Table
from rich.text import Text

from memledger.report.compare_table import _mark, wrappable
from memledger.units import format_bytes
from memledger.verify.verdict import CompareReport


def ranks_table(ranks: list[CompareReport], job: CompareReport, worst: int) -> Table:
    t = Table(title=f"{len(ranks)} ranks: each rank's gradient gate and peaks",
              title_justify="left", header_style="bold", box=box.SIMPLE_HEAD, pad_edge=False,
              collapse_padding=True)
    for name, right in (("policy", False), ("rank", True), ("gradients", False),
                        ("predicted peak", True), ("measured peak", True)):
        t.add_column(name, justify="right" if right else "left", no_wrap=name != "policy",
                     overflow="fold")

    def peak(n: int, performance: bool) -> str:
        return format_bytes(n) if performance and n else "–"

    perf = job.performance
    if perf:
        for r, rep in enumerate(ranks):
            t.add_row("none (baseline)" if r == 0 else "", str(r), "",
                      peak(rep.baseline["predicted_peak_bytes"], perf),
                      peak(rep.baseline["measured_peak_bytes"], perf)
                      + (" ◀ worst" if r == worst else ""), style="dim")
    for p in job.policies:
        mark = " ◀ rejected" if p.verdict == "REJECT" else " ◀ worst"   # the job row's rank
        for x in p.by_rank:
            r = x["rank"]
            t.add_row(wrappable(p.policy) if r == 0 else "", str(r), _mark(x["gradients"]),
                      peak(x["predicted_peak_bytes"], perf),
                      Text(peak(x["measured_peak_bytes"], perf)
                           + (mark if r == p.rank and len(p.by_rank) > 1 else "")))
    return t
