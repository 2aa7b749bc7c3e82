"""Check 9: a loss term made from gradients taken without a graph (no torch).

dead_penalty: `torch.autograd.grad` without `create_graph=True`, its result turned into a
term that was added to a loss and backpropagated (WGAN-GP's gradient penalty, an R1
penalty): the term has no history, so it changes the loss's value and trains nothing.
An error: the objective is not the one the script asks for, every step, and a term added
to a loss is never meant to carry no gradient (Note [A gradient penalty without
create_graph] in memledger/trace/doctor_penalty.py says what is not one).
"""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Run, steps_named


def dead_penalty(run: Run) -> list[Finding]:
    by_call: dict[tuple[str, int], list[dict]] = {}
    for r in run.penalties:
        by_call.setdefault((str(r.get("grad_file", "")), int(r.get("grad_line", 0) or 0)),
                           []).append(r)
    out = []
    for (file, line), recs in by_call.items():
        first = recs[0]
        steps = sorted({int(r["step"]) for r in recs})
        out.append(Finding(
            check="dead_penalty", severity="error", where=Where(file=file, line=line),
            message=(f"a loss term made from torch.autograd.grad() without create_graph=True "
                     f"(line {line}) was added to the loss at line {first.get('add_line', 0)} "
                     f"and backpropagated at line {first.get('line', 0)}, in "
                     f"{steps_named(steps)}: the gradients carry no history, so the term changes "
                     "the loss's value and trains nothing (a gradient penalty); pass "
                     "create_graph=True to torch.autograd.grad()"),
            evidence={"backward_passes": len(recs), "steps": steps,
                      "add_line": int(first.get("add_line", 0) or 0),
                      "backward_line": int(first.get("line", 0) or 0)}))
    return out
