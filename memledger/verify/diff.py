"""Comparing two capture runs, step by step, gate by gate.

# Note [Gates follow causality]
Two runs that part ways at step s differ in everything after s: a parameter that lost its
gradient at step 0 is not updated, so *every* gradient differs at step 1. Reporting that
gradient difference would name the wrong gate and the wrong parameter. So the comparison
walks the steps in order and, within a step, the gates in order (inputs, gradients, update),
and stops at the first finding: that is the cause, the rest are consequences.

Within the step where the runs part, every gate is evaluated (so `gates` shows each one
that failed there) and the verdict names one cause: see `_cause`.

# Note [Tolerance]
`rtol == 0` means bitwise: two tensors pass when their bytes are equal (so -0.0 != 0.0 and
a NaN passes only against the same NaN). Otherwise a tensor passes when
`max|a - b| <= rtol * max|a|`, relative to the tensor's own scale rather than element by
element, because gradients hold many values near zero whose element-wise relative error
means nothing. Worked example: baseline grad [1.0, -2.0, 1e-9], candidate
[1.0, -2.0002, 2e-9]: max abs diff 2e-4, scale 2.0, rel 1e-4 → passes rtol 1e-4, fails 1e-5.
The reported `max_rel` is always this tensor-scale relative difference.

A baseline that does not agree with itself gives each tensor at each step its own noise
floor (its relative difference between the two baseline runs at that step) and the limit
for that tensor at that step becomes `max(rtol, 10 × floor)`, where a tensor's floor is at
least the median floor of its kind (gradient, parameter, buffer, optimizer state) at that
step. Per tensor, not one global number: a bias whose gradient is nearly zero (a dead ReLU
unit) has a relative noise of 0.1 where a weight has 1e-5, and a global floor would let
every tensor drift by 10%. At least the median: a small tensor can come out bitwise equal
in the two baseline runs by chance (the noise vanished in rounding) and differ in a third.
Per step, because runs that differ by noise drift apart step by step (Adam turns a 1e-7
difference in a near-zero gradient into a full learning-rate step). Ten times, because the
candidate is one more sample of that noise, and the maximum over a small tensor varies
several-fold between samples; a real defect (a 1e-3 perturbation, other dropout masks)
sits orders of magnitude above it.
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field

import torch

from memledger.verify.capture import bitwise_equal

GATES = ("inputs", "gradients", "update")


NOISE_FACTOR = 10.0  # a candidate is one more sample of the noise; see Note [Tolerance]


@dataclass(frozen=True)
class Tolerance:
    """How far apart two tensors may be; see Note [Tolerance].

    `floors`: per step and tensor ("0:gradient:w", "1:buffer:bn.running_mean",
    "2:optimizer state:w.step", ...), the relative difference between two baseline runs;
    that tensor may then differ by `NOISE_FACTOR` times as much at that step. Empty when the
    baseline is deterministic.
    """

    rtol: float = 0.0
    floors: dict[str, float] = field(default_factory=dict)
    typical: dict[str, float] = field(default_factory=dict)   # "step:kind" -> median floor

    @classmethod
    def with_noise(cls, rtol: float, floors: dict[str, float]) -> "Tolerance":
        by_kind: dict[str, list[float]] = {}
        for key, v in floors.items():
            step, kind, _ = key.split(":", 2)
            by_kind.setdefault(f"{step}:{kind}", []).append(v)
        typical = {k: statistics.median(v) for k, v in by_kind.items()}
        return cls(rtol, floors, typical)

    def limit(self, step: int, key: str) -> float:
        kind = key.split(":", 1)[0]
        floor = max(self.floors.get(f"{step}:{key}", 0.0),
                    self.typical.get(f"{step}:{kind}", 0.0))
        return max(self.rtol, NOISE_FACTOR * floor)

    def describe(self) -> str:
        base = "bitwise" if self.rtol == 0 else f"rtol {self.rtol:.1e}"
        return base + (f" or {NOISE_FACTOR:g} × the baseline's own noise" if self.floors
                       else "")


@dataclass
class Diff:
    """The difference of one tensor between two runs."""

    name: str
    step: int
    max_abs: float = 0.0
    max_rel: float = 0.0
    bitwise: bool = True     # the bytes are equal

    def text(self) -> str:
        if not self.bitwise and self.max_abs == 0:
            return "equal values, different bytes (a signed zero or a NaN payload)"
        return f"max abs {self.max_abs:.3g}, rel {self.max_rel:.3g}"


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


def tensor_diff(name: str, step: int, a: torch.Tensor, b: torch.Tensor) -> Diff:
    d = Diff(name, step)
    if bitwise_equal(a, b):
        return d
    d.bitwise = False
    if a.shape != b.shape or a.dtype != b.dtype:
        d.max_abs = d.max_rel = float("inf")
        return d
    a64, b64 = a.double(), b.double()
    d.max_abs = float((a64 - b64).abs().max()) if a.numel() else 0.0
    if d.max_abs != d.max_abs:  # NaN
        d.max_abs = float("inf")
    scale = float(a64.abs().max()) if a.numel() else 0.0
    d.max_rel = d.max_abs / scale if scale > 0 else (0.0 if d.max_abs == 0 else float("inf"))
    return d


def _ok(d: Diff, tol: Tolerance, key: str) -> bool:
    limit = tol.limit(d.step, key)
    return d.bitwise if limit == 0 else d.max_rel <= limit


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
        if not _ok(d, tol, f"gradient:{name}") and (worst_bad is None
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
        if not _ok(d, tol, f"{what}:{name}"):
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


def noise_floors(a: dict, b: dict) -> dict[str, float]:
    """Per step and tensor, the relative difference between two baseline runs (keys as
    `Tolerance.floors`); only tensors that differ are listed."""
    floors: dict[str, float] = {}
    for s, (sa, sb) in enumerate(zip(a["steps"], b["steps"])):
        pairs = [("gradient", sa["grads"], sb["grads"]), ("parameter", sa["params"], sb["params"]),
                 ("buffer", sa["buffers"], sb["buffers"])]
        pairs.append(("optimizer state",
                      {f"{n}.{k}": t for n, st in sa["optim"].items() for k, t in st.items()},
                      {f"{n}.{k}": t for n, st in sb["optim"].items() for k, t in st.items()}))
        for what, da, db in pairs:
            for name, ta in da.items():
                tb = db.get(name)
                if ta is None or tb is None:
                    continue
                d = tensor_diff(name, s, ta, tb)
                if not d.bitwise:
                    floors[f"{s}:{what}:{name}"] = d.max_rel
    return floors
