"""Check 10: tensor memory held only by reference cycles (no torch).

cyclic_garbage: at a step's end, tensors nothing reachable refers to, still in memory
because they sit on (or under) a reference cycle, which only Python's cyclic garbage
collector frees, at a time of its own choosing (Note [Tensors only the garbage collector
frees] in memledger/trace/doctor_garbage.py). A warning: the update is right, the memory is
not: it stays in use after its last use, often for steps, and the peak moves with the
collector's schedule.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding
from memledger.doctor.records import Run, steps_named, where
from memledger.units import format_bytes


def cyclic_garbage(run: Run) -> list[Finding]:
    groups: dict[tuple, list[dict]] = {}
    for r in run.garbage:
        key = (r.get("kind"), r.get("loop", r.get("cycle")), r.get("file", ""), r.get("line", 0))
        groups.setdefault(key, []).append(r)
    out = []
    for recs in groups.values():
        first = recs[0]
        steps = sorted({int(r["step"]) for r in recs})
        most = max(recs, key=lambda r: int(r["bytes"]))
        n, size = int(most["tensors"]), format_bytes(int(most["bytes"]))
        these = "it" if n == 1 else "them"
        held = f"{n} tensor{'s' if n != 1 else ''} ({size}) no longer reachable " + (
            f"{'was' if n == 1 else 'were'} still in memory at the end of {steps_named(steps)}"
            if not all(r.get("collected") for r in recs) else
            f"stayed in memory until one of Python's garbage collections in "
            f"{steps_named(steps)} freed {these}")
        cycle = f" ({first['cycle']})" if first.get("cycle") else ""
        out.append(Finding(
            check="cyclic_garbage", severity="warning", where=where(first),
            message=f"{held}: {_why(first, these, cycle)}; only Python's garbage collector "
                    "frees a cycle, at a time of its choosing, so the memory stays in use "
                    f"after its last use and the peak moves with the collector; {_fix(first)}",
            evidence={"steps": steps, "bytes": int(most["bytes"]), "tensors": n,
                      "bytes_per_step": _bytes_per_step(recs, steps),
                      "kind": first.get("kind"), "cycle": first.get("cycle", ""),
                      "structures": int(most.get("structures", 1))}))
    return out


# Note [Two records of one cycle in a step]
# A step's scan writes one record per structure the garbage hangs from, and a finding
# groups the records of one cycle (its `loop`): Keras' `tree_flatten` cycle held each
# step's activations (16,384 B, freed by a collection inside the step) and, from the first
# call only, the batch the model was built from (`['tokens']`, 4x16 int64 over numpy rows
# of 17, a 536 B storage, left at the step's end): `bytes_per_step` listed records, five
# for four steps ([16384, 536, 16384, 16384, 16384], tests/clients/train_keras.py --loop
# custom --manual-gc). It is one sum per step now, in the order of `steps`.
def _bytes_per_step(recs: list[dict], steps: list[int]) -> list[int]:
    """The bytes of `recs` each step of `steps` left, summed over its records."""
    by_step = dict.fromkeys(steps, 0)
    for r in recs:
        by_step[int(r["step"])] += int(r["bytes"])
    return list(by_step.values())


def _why(r: dict, these: str, cycle: str) -> str:
    kind, what = r.get("kind"), r.get("what", "")
    if kind == "ctx":
        attrs = ", ".join(f"`ctx.{a}`" for a in r.get("attrs", ()))
        return (f"the custom autograd.Function `{what}` keeps {these} as {attrs}, and ctx is "
                f"the grad_fn of what it keeps: a reference cycle{cycle}")
    if kind == "frame":
        exc = r.get("exception")
        via = f" and its {exc}'s traceback" if exc else ""
        return (f"the frame of `{what}`{via} hold{'s' if not exc else ''} {these}: a reference "
                f"cycle{cycle}")
    if kind == "module":
        return (f"{'it belongs' if these == 'it' else 'they belong'} to a dropped `{what}` "
                f"that refers back to itself: a reference cycle{cycle}")
    return f"a reference cycle of {what or 'objects'} holds {these}{cycle}"


def _fix(r: dict) -> str:
    kind = r.get("kind")
    if kind == "ctx":
        return ("keep tensors for backward with ctx.save_for_backward() (and read them with "
                "ctx.saved_tensors), not as attributes of ctx")
    if kind == "frame":
        return ("do not keep the exception (or its traceback) in a variable of the function "
                "that caught it, or `del` it before the function returns")
    if kind == "module":
        return ("break the cycle before dropping it (a hook or attribute that points back at "
                "the module), or call gc.collect() after dropping it")
    return "break the cycle, or call gc.collect() where the tensors are let go of"
