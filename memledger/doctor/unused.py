"""Check 11: a forward under gradients whose graph no backward used (no torch).

unused_graph: a top-level module call made with gradients on whose outputs' graph no
backward (nor `torch.autograd.grad`) ran before it was dropped (Note [A graph no backward
used] in memledger/trace/doctor_unused.py): an evaluation or logging forward left outside
`torch.no_grad()`. A warning: the update is right, the memory is not; autograd kept what
the call saved for a backward that never came.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, span, where


def unused_graph(run: Run) -> list[Finding]:
    groups: dict[tuple, list[dict]] = {}
    for r in run.unused_graphs:
        groups.setdefault((r.get("file", ""), r.get("line", 0), r.get("var", ""),
                           r.get("cls", "")), []).append(r)
    out = []
    for (_, line, var, cls), recs in groups.items():
        steps = sorted({int(r["step"]) for r in recs})
        n = len(recs)
        who = f"`{var}` ({cls})" if var else f"a `{cls}`"
        out.append(Finding(
            check="unused_graph", severity="warning", where=where(recs[0]),
            message=(f"{who} ran {n} forward{'s' if n != 1 else ''} under gradients in step "
                     f"{span(steps)} whose graph no backward used: autograd kept what "
                     f"{'they' if n != 1 else 'it'} saved for backward until the graph was "
                     "dropped (an evaluation or logging forward?); run it under "
                     "torch.no_grad() or torch.inference_mode()"),
            evidence={"calls": n, "steps": steps, "var": var, "cls": cls,
                      "training": any(r.get("training") for r in recs)}))
    return out
