"""Check 11: a forward under gradients whose graph no backward used (no torch).

unused_graph: a top-level module call made with gradients on whose outputs' graph no
backward (nor `torch.autograd.grad`) ran before it was dropped (Note [A graph no backward
used] in memledger/trace/doctor_unused.py): an evaluation or logging forward left outside
`torch.no_grad()`. A warning: the update is right, the memory is not; autograd kept what
the call saved for a backward that never came.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, steps_named, where

# Note [Calls no variable names]
# A call is top-level when no module call is around it. A library that runs a model through
# a method of its own rather than `forward` makes each submodule's call top-level: TabNet's
# `explain` (its feature importances, at the end of `fit`, under gradients) calls
# `network.forward_masks`, whose feature and attentive transformers, BatchNorm and an
# inline `ReLU()` ran as four findings on the script's one line (`model.fit(...)`), "a
# `FeatTransformer` ran 8 forwards ...", "a `ReLU` ran 6 forwards ...", one missing
# `no_grad` read four times (tests/clients/train_tabnet.py). Calls no variable of the
# script names are one finding per line, naming each class and its count; a named model
# (`network`, `model`) keeps its own.


# Note [A line that also trains]
# A library's fit loop runs from one line of the script: pykan's `model.fit(dataset,
# opt="Adam", steps=3)` runs its forward, backward and step, and beside them forwards of
# its own under gradients that no backward uses (`get_act` for the grid update, a test
# loss). The finding told the user to "run the line under torch.no_grad()", which would
# stop the training itself (tests/clients/train_kan_ema.py --fit). Where a backward ran
# from the same line, the advice is the library's setting or its authors.
def unused_graph(run: Run) -> list[Finding]:
    groups: dict[tuple, list[dict]] = {}
    # a step whose backward failed on a loss with no history: its forward's graph was cut
    # off the loss, which cut_graph names (Note [A loss with no history], doctor/graph.py)
    failed = {int(b["window"]) for b in run.backwards if b.get("no_history")}
    for r in run.unused_graphs:
        if int(r["step"]) in failed:
            continue
        var = r.get("var", "")
        # Note [Calls no variable names]: one finding per line for those
        groups.setdefault((r.get("file", ""), r.get("line", 0), var,
                           r.get("cls", "") if var else "", r.get("via", "")), []).append(r)
    # Note [A line that also trains]
    trains = {(b.get("file", ""), b.get("line", 0)) for b in run.backwards}
    out = []
    for (file, line, var, _, _), recs in groups.items():
        steps = sorted({int(r["step"]) for r in recs})
        n = len(recs)
        counts: dict[str, int] = {}
        for r in recs:
            counts[r.get("cls", "")] = counts.get(r.get("cls", ""), 0) + 1
        cls = "/".join(counts)
        # Note [Calls inside a model the script names]: where every call is one model's
        owners = {r.get("owner", "") for r in recs}
        owner = owners.pop() if len(owners) == 1 else ""
        listed = ", ".join(f"`{c}` x{k}" for c, k in counts.items())
        who = f"`{var}` ({cls})" if var else (
            f"modules of `{owner}` called without `{owner}`'s own call around them ({listed})"
            if owner else f"a `{cls}`" if len(counts) == 1 else
            f"modules no variable of the script names ({listed})")
        via = recs[0].get("via", "")   # Note [A library's call no backward used]
        # Note [A library's own forward from the script's line] (trace/doctor_unused.py)
        # (one line's calls, run from several lines of one library, as TabNet's `explain`
        # runs its transformers: one finding, naming the first)
        ran_by = "" if via else recs[0].get("ran_by", "")
        head = (f"{who} ran {n} forward{'s' if n != 1 else ''} under gradients in "
                f"{steps_named(steps)} whose graph no backward used"
                + (f", called by {via}" if via else "")
                + (f", run by {ran_by} from this line" if ran_by else "") + ": autograd kept "
                f"what {'they' if n != 1 else 'it'} saved for backward until the graph was "
                "dropped (")
        if (ran_by or via) and (file, line) in trains:
            tail = ("the library's own forward: a test loss, a log, a grid update?); this "
                    "line also trains (a backward runs from it), so torch.no_grad() around "
                    "it would stop the training: turn that forward off by the library's "
                    "setting where it has one, or tell its authors")
        elif ran_by:
            tail = ("the library's own forward: a tracer that reads the graph, a shape "
                    "check?); where it needs no graph, run the line under torch.no_grad(); "
                    "where it reads the graph, let go of what it returned once done (call "
                    "gc.collect() then, in case a reference cycle holds it), or tell its "
                    "authors")
        else:
            tail = (("the library's own call: a shape check or a warm-up?" if via else
                     "an evaluation or logging forward?")
                    + "); run it under torch.no_grad() or torch.inference_mode()"
                    + (" where the library lets you, or tell its authors" if via else ""))
        out.append(Finding(
            check="unused_graph", severity="warning", where=where(recs[0]),
            message=head + tail,
            evidence={"calls": n, "steps": steps, "var": var, "cls": cls,
                      **({"owner": owner} if owner else {}),
                      "training": any(r.get("training") for r in recs),
                      **({"via": via} if via else {}),
                      **({"ran_by": ran_by} if ran_by else {})}))
    return out
