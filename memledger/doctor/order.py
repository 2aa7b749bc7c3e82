"""Check 8: the order of backward, clipping and optimizer.step() (no torch).

- double_step: an optimizer stepped again on the gradients its previous step used, with no
  backward between (a step inside the accumulation loop and one after it, a copy-pasted
  `opt.step()`): the same gradients applied twice. Several optimizers stepping once each,
  K backward passes then one step, GradScaler's skipped step and a closure that runs
  backward inside step() (LBFGS) are not repeats (Note [Where a clip and a step fall] in
  memledger/trace/doctor_order.py).
- clip_order: a clip_grad_norm_ / clip_grad_value_ call that cannot clip the gradients the
  step uses: before backward() (the backward adds unclipped gradient after it), after
  optimizer.step() (the step used them unclipped), or before scaler.unscale_() (it clips
  the scaled gradients: max_norm acts divided by the scale).

Both are errors: the update is not the one the script asks for, on every step, and no
correct loop puts a step or a clip there (a clip that clips nothing, `max_norm=inf` to log
the norm, is not recorded at all).
"""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Record, Run, steps_named, where
from memledger.units import count


def double_step(run: Run) -> list[Finding]:
    repeats: dict[int, list[Record]] = {}
    for st in run.steps:
        if st.get("repeat", 1) > 1 and st.get("again"):
            repeats.setdefault(st["opt"], []).append(st)
    out = []
    for opt, reps in repeats.items():
        first = reps[0]           # the second step() call on one backward's gradients
        before = [st for st in run.steps if st["opt"] == opt and st["step"] < first["step"]]
        prev_line = int(before[-1].get("line", 0)) if before else 0
        times = max(int(st["repeat"]) for st in reps)
        idx = set().union(*(set(st["again"]) for st in reps))
        out.append(Finding(
            check="double_step", severity="error", where=where(first),
            message=(f"optimizer.step() ({first['cls']}) ran {times} times on the gradients "
                     f"of one backward pass in {steps_named(st['step'] for st in reps)} (line "
                     f"{prev_line} had stepped them already): {count(len(idx), 'parameter')} "
                     f"({run.names(idx)}) got the same update {times} times; call step() "
                     "once per backward (once after the accumulation loop)"),
            evidence={"optimizer": first["cls"], "steps_per_backward": times,
                      "steps": [st["step"] for st in reps], "params": len(idx),
                      "first_step_line": prev_line}))
    return out


_LIMIT = {"clip_grad_value_": "clip_value"}


def _clip_where(c: Record) -> Where:
    return Where(file=str(c.get("file", "")), line=int(c.get("line", 0) or 0))


def clip_order(run: Run) -> list[Finding]:
    clips = {int(c["n"]): c for c in run.clips}
    step_of = {st["step"]: st for st in run.steps}
    # (kind, clip line) -> (the first clip record, steps, parameter indices)
    found: dict[tuple[str, Where], tuple[Record, set[int], set[int]]] = {}

    def add(kind: str, c: Record, steps, idx) -> None:
        _, s, i = found.setdefault((kind, _clip_where(c)), (c, set(), set()))
        s.update(steps)
        i.update(idx)

    for st in run.steps:
        for n, idx in (st.get("clip_early") or {}).items():
            left = set(idx) - set(st.get("clipped", ()))
            if left and int(n) in clips:
                add("before_backward", clips[int(n)], [st["step"]], left)
    for c in run.clips:
        if c.get("used"):
            done = set().union(*(set(step_of.get(s, {}).get("clipped", ())) for s in c["used_by"]))
            left = set(c["used"]) - done
            if left:
                add("after_step", c, c["used_by"], left)
        if c.get("scaled"):
            add("scaled", c, [c["window"]], c["scaled"])
    return [_finding(kind, c, steps, idx, run) for (kind, _), (c, steps, idx) in found.items()]


def _finding(kind: str, c: Record, steps: set[int], idx: set[int], run: Run) -> Finding:
    fn = str(c.get("fn", "clip_grad_norm_"))
    grads = f"the gradients of {count(len(idx), 'parameter')} ({run.names(idx)})"
    evidence = {"order": kind, "function": fn, "params": len(idx), "steps": sorted(steps)}
    if kind == "before_backward":
        message = (f"{fn}() ran before the backward() that filled the gradients it should "
                   f"clip, in {steps_named(steps)}: optimizer.step() used {grads} unclipped; "
                   "call it after backward(), just before optimizer.step()")
    elif kind == "after_step":
        message = (f"{fn}() ran after optimizer.step() had used the gradients, in "
                   f"{steps_named(steps)}: the step used {grads} unclipped; call it between "
                   "backward() and optimizer.step()")
    else:
        scale, limit = float(c.get("scale") or 0.0), c.get("limit")
        name = _LIMIT.get(fn, "max_norm")
        acts = (f": {name}={limit:g} acts as {limit / scale:.3g} on the true gradients"
                if scale and isinstance(limit, (int, float)) else "")
        message = (f"{fn}() clipped {grads} while still multiplied by the GradScaler's "
                   f"scale ({scale:g}), in {steps_named(steps)}{acts}; call "
                   "scaler.unscale_(optimizer) before clipping")
        evidence.update(scale=scale, limit=limit)
    return Finding(check="clip_order", severity="error", where=_clip_where(c),
                   message=message, evidence=evidence)


# Note [A gradient cleared by hand] (trace/doctor_order.py): how the record's line clears
_CLEARED_BY = {"none": "this `.grad = None`", "zero_": "this `.grad.zero_()`",
               "mul_": "this `.grad.mul_(0)`", "fill_": "this `.grad.fill_(0)`",
               "data.zero_": "this `.grad.data.zero_()`",
               "data.mul_": "this `.grad.data.mul_(0)`",
               "data.fill_": "this `.grad.data.fill_(0)`",
               "_foreach_zero_": "this `torch._foreach_zero_()`",
               "_foreach_mul_": "this `torch._foreach_mul_(grads, 0)`",
               # Note [A clear by a zero tensor, a zero tensor set]
               "mul__t": "this `.grad.mul_()` by a tensor of zeros",
               "data.mul__t": "this `.grad.data.mul_()` by a tensor of zeros",
               "fill__t": "this `.grad.fill_()` with a zero tensor",
               "data.fill__t": "this `.grad.data.fill_()` with a zero tensor",
               "_foreach_mul__t": "this `torch._foreach_mul_()` by a tensor of zeros",
               "set_zeros": "this `.grad = ...` (a tensor of zeros)",
               "data.set_zeros": "this `.grad.data = ...` (a tensor of zeros)"}


def written_after_step(run: Run) -> list[Finding]:
    """Gradients changed after the step that used them and cleared by a zero_grad before
    any step read them (Note [A gradient written after the step] in trace/doctor_order.py),
    or by hand (Note [A gradient cleared by hand]), one finding per clearing line."""
    found: dict[tuple[str, int], tuple[Record, set[int], set[int]]] = {}
    for r in run.late_writes:
        _, steps, idx = found.setdefault((str(r.get("file", "")), int(r.get("line", 0) or 0)),
                                         (r, set(), set()))
        steps.add(int(r["step"]))
        idx.update(int(i) for i in r["params"])
    out = []
    for r, steps, idx in found.values():
        grads = f"the gradients of {count(len(idx), 'parameter')} ({run.names(idx)})"
        cleared = _CLEARED_BY.get(str(r.get("how", "")), "this zero_grad()")
        out.append(Finding(
            check="written_after_step", severity="error", where=where(r),
            message=(f"{grads} were changed after optimizer.step() had used them and then "
                     f"cleared by {cleared} before any step read them, in "
                     f"{steps_named(steps)}: the change (a gradient filter, a scaling) never "
                     "reached an update; make it between backward() and optimizer.step()"),
            evidence={"params": len(idx), "steps": sorted(steps)}))
    return out
