"""Comparing two capture runs, step by step, gate by gate.

# Note [Gates follow causality]
Two runs that part ways at step s differ in everything after s: a parameter that lost its
gradient at step 0 is not updated, so *every* gradient differs at step 1. Reporting that
gradient difference would name the wrong gate and the wrong parameter. So the comparison
walks the steps in order and, within a step, the gates in order (inputs, gradients, update),
and stops at the first finding: that is the cause, the rest are consequences.

Within the step where the runs part, every gate is evaluated (so `gates` shows each one
that failed there) and the verdict names one cause: see `_cause`.

Tolerances (bitwise on CPU, relative on CUDA, noise floors): memledger/verify/tolerance.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from memledger.verify.tolerance import Diff, Tolerance, tensor_diff, within

GATES = ("inputs", "gradients", "update")


@dataclass
class Finding:
    """The first thing found wrong: which gate, which tensor, at which step, and how."""

    gate: str          # inputs | gradients | update
    step: int
    name: str          # parameter / buffer / input label
    message: str       # one line a person reads
    diff: Diff | None = None
    missing_gradient: bool = False


@dataclass
class Comparison:
    """Result of comparing a candidate run with the baseline run."""

    steps_compared: int = 0
    finding: Finding | None = None          # the cause named in the verdict
    failed: tuple[str, ...] = ()            # every gate that failed at that step
    worst_gradient: Diff | None = None      # largest gradient difference seen (0: bitwise)
    frozen_changed: list[str] = field(default_factory=list)

    @property
    def gates(self) -> dict[str, bool]:
        if "inputs" in self.failed:   # different data: nothing after it is comparable
            return {g: False for g in GATES} | {"inputs": False}
        return {g: g not in self.failed for g in GATES}


def compare(base: dict, cand: dict, tol: Tolerance) -> Comparison:
    """Walk the steps of two captures in order; stop at the first finding (see the Note)."""
    out = Comparison()
    bsteps, csteps = base["steps"], cand["steps"]
    for s, (b, c) in enumerate(zip(bsteps, csteps)):
        out.steps_compared = s + 1
        out.frozen_changed = sorted(set(out.frozen_changed) | set(c["frozen_changed"]))
        found = {"inputs": _inputs(s, b, c), "gradients": _gradients(s, b, c, tol, out)}
        found["update"] = _update(s, b, c, tol, same_grads=found["gradients"] is None)
        found = {g: f for g, f in found.items() if f is not None}
        if found:
            out.failed = tuple(found)
            out.finding = _cause(found)
            return out
    if len(csteps) < len(bsteps):
        out.failed = ("update",)
        out.finding = Finding("update", len(csteps), "", f"the script stopped after "
                              f"{len(csteps)} steps under this policy (baseline: {len(bsteps)})")
    return out


def _cause(found: dict[str, Finding]) -> Finding:
    """The finding a verdict names when several gates fail at one step.

    Gate order, except that a missing gradient outranks different gradients: a graph cut
    before a shared (tied) parameter also changes that parameter's gradient, and the cut
    is the cause.
    """
    if "inputs" in found:
        return found["inputs"]
    upd = found.get("update")
    if upd is not None and upd.missing_gradient:
        return upd
    return found.get("gradients") or upd


def _inputs(s: int, b: dict, c: dict) -> Finding | None:
    bi, ci = b["inputs"], c["inputs"]
    for (bl, bd), (cl, cd) in zip(bi, ci):
        if bl != cl or bd != cd:
            return Finding("inputs", s, bl, f"input {bl} differs at step {s}")
    if len(bi) != len(ci):
        return Finding("inputs", s, "", f"step {s} fed {len(ci)} input tensors, "
                       f"baseline {len(bi)}")
    return None


def _gradients(s: int, b: dict, c: dict, tol: Tolerance, out: Comparison) -> Finding | None:
    worst_bad: Diff | None = None
    for name, bg in b["grads"].items():
        cg = c["grads"].get(name)
        if bg is None or cg is None:
            continue   # a missing gradient is the update gate's finding
        d = tensor_diff(name, s, bg, cg)
        if out.worst_gradient is None or d.max_rel > out.worst_gradient.max_rel:
            out.worst_gradient = d
        if not within(d, tol, f"gradient:{name}") and (worst_bad is None
                                                    or d.max_rel > worst_bad.max_rel):
            worst_bad = d
    extra = [n for n, g in c["grads"].items() if g is not None and b["grads"].get(n) is None]
    if worst_bad is not None:
        return Finding("gradients", s, worst_bad.name,
                       f"gradient of {worst_bad.name} differs at step {s}: {worst_bad.text()} "
                       f"({tol.describe()})", worst_bad)
    if extra:
        return Finding("gradients", s, extra[0], f"{extra[0]} has a gradient at step {s} "
                       "that the baseline does not have")
    return None


def _update(s: int, b: dict, c: dict, tol: Tolerance, same_grads: bool) -> Finding | None:
    """Missing or non-finite gradients, parameters that did not move (or frozen ones that
    did), then the state after the step. Parameters and optimizer state are compared only
    when the gradients were the same: different gradients move them differently, which is
    the gradients gate's finding, not a second one. Buffers are always compared (they are
    written in the forward: a recomputed BatchNorm updates its running stats twice)."""
    missing = [n for n, g in b["grads"].items() if g is not None and c["grads"].get(n) is None]
    if missing:
        more = f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""
        return Finding("update", s, missing[0], f"{missing[0]}{more} has no gradient at step "
                       f"{s}: the graph was cut (detach, no_grad or a frozen branch)",
                       missing_gradient=True)
    new_nonfinite = [n for n in c["nonfinite"] if n not in b["nonfinite"]]
    if new_nonfinite:
        return Finding("update", s, new_nonfinite[0],
                       f"gradient of {new_nonfinite[0]} is not finite at step {s}")
    unmoved = [n for n in c["unmoved"] if n not in b["unmoved"]]
    if unmoved:
        return Finding("update", s, unmoved[0], f"{unmoved[0]} did not move at step {s}")
    frozen = [n for n in c["frozen_changed"] if n not in b["frozen_changed"]]
    if frozen:
        return Finding("update", s, frozen[0], f"frozen parameter {frozen[0]} changed at step {s}")
    f = _state(s, "buffer", b["buffers"], c["buffers"], tol)
    if f is not None or not same_grads:
        return f
    f = _state(s, "parameter", b["params"], c["params"], tol)
    if f is not None:
        return f
    flat_b = {f"{n}.{k}": t for n, st in b["optim"].items() for k, t in st.items()}
    flat_c = {f"{n}.{k}": t for n, st in c["optim"].items() for k, t in st.items()}
    return _state(s, "optimizer state", flat_b, flat_c, tol)


def _state(s: int, what: str, b: dict, c: dict, tol: Tolerance) -> Finding | None:
    worst: Diff | None = None
    bad = 0
    for name, bt in b.items():
        ct = c.get(name)
        if ct is None:
            return Finding("update", s, name, f"{what} {name} is missing after step {s}")
        d = tensor_diff(name, s, bt, ct)
        if not within(d, tol, f"{what}:{name}"):
            bad += 1
            if worst is None or d.max_rel > worst.max_rel:
                worst = d
    if worst is not None:
        more = f"; {bad - 1} more differ" if bad > 1 else ""
        return Finding("update", s, worst.name, f"{what} {worst.name} differs after step {s}: "
                       f"{worst.text()} ({tol.describe()}{more})", worst)
    extra = [n for n in c if n not in b]
    if extra:
        return Finding("update", s, extra[0], f"{what} {extra[0]} appears only under the policy")
    return None
