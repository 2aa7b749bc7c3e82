"""Check 5: update accounting: step() calls against the updates they made.

- nonfinite_grad: a step ran on gradients holding NaN or infinity (the parameters follow).
- zeroed_before_step: this step's backward filled gradients that were gone (None, or every
  one zero) when step() ran: zero_grad between backward and step.
- dropped_update: backward passes whose gradients no step ever used (GradScaler skips the
  step when its gradients are not finite; a zero_grad before step does the same). Not one
  whose parameters moved in place before the next backward: SAM's first step uses the
  gradient to perturb the weights, then zeroes it; nor one that gave a gradient to an input
  (FGSM and PGD take it for the perturbation, then zero the parameters'); nor one whose
  gradients an optimizer read into its own state between steps (SophiaG's
  `update_hessian()`: Note [Gradients an optimizer takes outside its step] in
  trace/doctor_probe.py).
- no_update: step() changed no trainable parameter although some had gradients.
- no_gradient: every step() ran with no gradient on any trainable parameter, and no
  backward filled one (Note [A step with no gradient]).
- scheduler_order / scheduler_rate: an LR scheduler stepped before the first optimizer step
  (its first value is skipped), or more often than its optimizer: its steps plus those a
  GradScaler skipped (torch's AMP recipe steps the scheduler once per `scaler.step()`).
"""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Record, Run, steps_named, where
from memledger.doctor.source import method_call_line
from memledger.units import count


def nonfinite_and_zeroed(run: Run) -> list[Finding]:
    out = []
    bad = [st for st in run.steps if st["nonfinite"]]
    if bad:
        idx = set().union(*(set(st["nonfinite"]) for st in bad))
        out.append(Finding(
            check="nonfinite_grad", severity="error", where=where(bad[0]),
            message=(f"optimizer.step() ran on non-finite gradients in "
                     f"{steps_named(st['step'] for st in bad)} ({count(len(idx), 'parameter')}: "
                     f"{run.names(idx)}); the parameters become NaN: clip, lower the learning "
                     "rate, or use a GradScaler"),
            evidence={"params": len(idx), "steps": [st["step"] for st in bad]}))
    zeroed = [st for st in run.steps if _cleared(st)]
    if zeroed:
        idx = set().union(*(set(st["zeroed"]) | set(st.get("zero", [])) for st in zeroed))
        out.append(Finding(
            check="zeroed_before_step", severity="error", where=where(zeroed[0]),
            message=(f"the gradients of {count(len(idx), 'parameter')} ({run.names(idx)}) were "
                     f"cleared between backward and optimizer.step() in "
                     f"{steps_named(st['step'] for st in zeroed)}: the step used none of "
                     "them; call zero_grad() before backward or after step()"),
            evidence={"params": len(idx), "steps": [st["step"] for st in zeroed]}))
    return out


def _lost(run: Run) -> list[Record]:
    """Backward passes with parameter gradients that no optimizer.step() used."""
    # passes a script kept and folded into a step's gradients: Note [A gradient folded into
    # the step's] in trace/doctor_folded.py
    used = {n for st in run.steps
            for n in (*st["bw"], *st.get("reeval", ()), *st.get("folded", ()))}
    # passes whose gradients a step found written over: judged, whatever came after them
    # (Note [A gradient written over] in trace/doctor_folded.py)
    over = {n for st in run.steps for n in st.get("written_over", ())} - used
    if not used and not over:
        return []
    last = max(used | over)
    # a backward whose parameters moved in place before the next one (SAM's ascent step
    # along its gradient, then zero_grad) was used, though by no optimizer.step()
    # nor one taken for an input's gradient (an adversarial example's perturbation)
    # nor one that left gradients beside `.grad` (per-sample gradients, which their own
    # optimizer uses: Note [Gradients beside .grad] in trace/doctor_probe.py)
    # nor one an optimizer read into its state between steps (SophiaG's Hessian: Note
    # [Gradients an optimizer takes outside its step] in trace/doctor_probe.py)
    return [b for b in run.backwards if b.get("params") and b["n"] not in used
            and (b["n"] < last or b["n"] in over) and not b.get("moved")
            and not b.get("input_grads")
            and not b.get("beside_grad") and not b.get("into_state")]


def _zero_as_computed(st: Record) -> bool:
    """Every gradient this step's backward filled was zero as backward left it."""
    return bool(st["accum"]) and len(set(st.get("zero_as_computed", ()))) >= len(st["accum"])


def _cleared(st: Record) -> bool:
    """Every gradient this step's backward filled was cleared before step(): it used none.
    Some of them cleared is a choice (DINO drops its last layer's gradients early in
    training by `p.grad = None`, and the optimizer skips those parameters)."""
    return bool(st["accum"]) and \
        len(set(st["zeroed"]) | set(st.get("zero", []))) >= len(st["accum"])


def dropped(run: Run) -> list[Finding]:
    lost = _lost(run)
    if not lost:
        return []
    bad = sum(1 for b in lost if b.get("nonfinite"))
    updates = sum(1 for st in run.steps if st.get("updated", 1) != 0 and not _cleared(st))
    # Note [A gradient written over] in trace/doctor_folded.py
    over = {n for st in run.steps for n in st.get("written_over", ())}
    why = (f"{bad} of them had non-finite gradients, so GradScaler skipped their step"
           if bad else "their gradients were written over (`.grad` set or overwritten with "
           "values made from none of them) before any step used them"
           if all(b["n"] in over for b in lost) else "a zero_grad ran before any step used them")
    return [Finding(
        check="dropped_update", severity="warning", where=where(lost[0]),
        message=(f"{len(lost)} of {len(run.backwards)} backward passes made gradients that no "
                 f"optimizer.step() used ({why}): {len(run.steps)} step() calls made "
                 f"{updates} updates for {len(run.backwards)} backward passes"),
        evidence={"backward_passes": len(run.backwards), "dropped": len(lost),
                  "dropped_nonfinite": bad, "optimizer_steps": len(run.steps),
                  "updates": updates})]


def no_update(run: Run) -> list[Finding]:
    # a step at learning rate 0 by a schedule that leaves 0 later (a warm-up from 0: the
    # default of transformers' linear and cosine schedules) is meant to change nothing
    scheduled = {st["opt"] for st in run.steps if st.get("lr_zero") is False}
    # a step that only built the optimizer's state (SOAP's and ADOPT's first) when a later
    # step of that optimizer moved its parameters: Note [A step that builds state] in
    # trace/doctor_probe.py
    moved_after = {}
    for st in run.steps:
        if st.get("updated", 1):
            moved_after[st["opt"]] = st["step"]
    # (a step whose gradients were all cleared is zeroed_before_step's: its cause is said;
    # one whose gradients were all zero as backward computed them had nothing to apply, as
    # a hinge whose margins are all met, or TRL's GRPO where both completions of each
    # prompt scored alike: Note [Zero as backward left it] in trace/doctor_probe.py)
    idle = [st for st in run.steps if st["accum"] and st.get("updated", 1) == 0
            and not (st.get("lr_zero") and st["opt"] in scheduled) and not _cleared(st)
            and not _zero_as_computed(st)
            and not (st.get("state_built") and moved_after.get(st["opt"], 0) > st["step"])]
    if not idle:
        return []
    why = ("the learning rate is 0" if all(st.get("lr_zero") for st in idle)
           # Note [A step that builds state] in trace/doctor_probe.py
           else "each step wrote only the optimizer's own state: one that gathers "
           "statistics before its first update? run more steps"
           if all(st.get("state_written") for st in idle)
           else "learning rate 0? a wrapper that skips the step?")
    return [Finding(
        check="no_update", severity="warning", where=where(idle[0]),
        message=(f"optimizer.step() changed no trainable parameter in "
                 f"{steps_named(st['step'] for st in idle)} although {len(idle[0]['accum'])} had "
                 f"gradients ({why})"),
        evidence={"steps": [st["step"] for st in idle]})]


def _sched_where(s: Record, first_step: Record) -> Where:
    """The scheduler's own `step()` call: found in the source by the variable the probe saw
    holding it (its step() is invisible to hooks), else the first optimizer step's line."""
    line = method_call_line(str(s.get("file", "")), str(s.get("var", "")), "step",
                            int(s.get("line", 0) or 0))
    return Where(file=str(s["file"]), line=line) if line else where(first_step)


def schedulers(run: Run) -> list[Finding]:
    out = []
    first = {}
    for st in run.steps:
        first.setdefault(st["opt"], st)
    # steps a GradScaler skipped on non-finite gradients: `scaler.step(opt)` ran, the
    # optimizer's step did not, and a scheduler stepped once per scaler.step() is on time
    skipped = sum(1 for b in _lost(run) if b.get("nonfinite"))
    for s in run.scheds:
        st = first.get(s["opt"])
        if st is None:
            continue
        if s["before_first_step"]:
            out.append(Finding(
                check="scheduler_order", severity="warning", where=_sched_where(s, st),
                message=(f"{s['cls']}.step() ran before the first optimizer.step(): the "
                         "schedule's first learning rate is skipped; call scheduler.step() "
                         "after optimizer.step()"),
                evidence={"scheduler_steps": s["steps"], "optimizer_steps": s["opt_steps"]}))
        if s["steps"] > s["opt_steps"] + skipped:
            out.append(Finding(
                check="scheduler_rate", severity="warning", where=_sched_where(s, st),
                message=(f"{s['cls']} stepped {s['steps']} times for {s['opt_steps']} "
                         "optimizer steps (stepping per micro-batch?): the schedule runs "
                         f"{s['steps'] / max(1, s['opt_steps']):.1f}x fast; step it once per "
                         "optimizer.step()"),
                evidence={"scheduler_steps": s["steps"], "optimizer_steps": s["opt_steps"]}))
    return out


# Note [A step with no gradient]
# A loop that computes its gradients somewhere other than `.grad` and forgets to move them
# there steps on nothing: torchjd's `autojac.backward(losses)` leaves each parameter's
# Jacobian in `p.jac`, which `jac_to_grad(params, aggregator)` aggregates into `.grad`;
# without that call every `optimizer.step()` finds `.grad` None and the model never moves
# (tests/clients/train_torchjd.py --bug no-aggregate). No backward accumulated a gradient
# (torchjd takes its Jacobians with `autograd.grad`), so no other check spoke: the doctor
# said "no findings". Every step of every optimizer with no trainable parameter holding a
# gradient, and none filled by a backward (that is `zeroed_before_step`'s), is an error;
# the parameters' gradient-like attributes (`.jac`: a tensor shaped as the parameter or
# a stack of it, Note [A parameter's gradients, as they are set] in trace/param_attrs.py)
# are named with the fix. Steps under a closure are read after it ran, as always.
# Note [A step that finds its own direction]
# A second-order optimizer builds its own Jacobian inside step() and writes the parameters
# from it: pypose's `LevenbergMarquardt` and `GaussNewton` (`torch.optim.Optimizer`
# subclasses) call `torch.autograd.functional.jacobian` on the model's residuals under
# `functional_call`, solve (J^T J + damping) d = -J^T r, and `p.add_(d)`, with no backward
# and no `.grad` ever set (tests/clients/train_pypose.py --mode pgo: a pose graph whose loss
# falls 0.0699 -> 0.0643 in two steps). The doctor said "ERROR no_gradient ... nothing
# trained; call backward() (or set `.grad`) before step()", false, and an error, which
# stops `compare`. A step that changed a trainable parameter (its version counter moved,
# the probe's `updated`) trained it whatever `.grad` held, so it is no step with no
# gradient; torchjd's unaggregated Jacobians leave Adam nothing to move, and stay one.
# tests/doctor/second_order.py is the same in plain torch (`torch.func.jacrev`).
# Note [A backward that reached no parameter the step holds]
# "call backward() before step()" was the advice wherever a step found no gradient, and
# it was wrong where the script did call it: MAML through higher with
# `track_higher_grads=False` (tests/clients/train_higher.py --first-order) runs the query
# loss's backward on fast weights that `detach().requires_grad_()` cut from the net, so
# backward gives the copies gradients and the net none; Adam steps on nothing in every
# step. Where backward passes ran in the steps, the finding says so and names the cut.
def no_gradient(run: Run) -> list[Finding]:
    steps = [st for st in run.steps if st.get("trainable")]
    if not steps or any(st.get("graded") or st["accum"] for st in steps):
        return []
    # a step that moved trainable parameters with no gradient computed its update itself
    # (Note [A step that finds its own direction]); an old capture has no `updated`: as before
    steps = [st for st in steps if not st.get("updated", 0)]
    if not steps:
        return []
    beside = sorted({a for st in steps for a in st.get("beside", ())})
    held = ", ".join(f"`.{a}`" for a in beside)
    ran = [b for b in run.backwards if b.get("window") in {st["step"] for st in steps}]
    fix = (f"; they hold {held} beside `.grad` (a Jacobian or per-sample gradients a "
           "library's backward leaves there), which step() never reads: aggregate it into "
           "`.grad` first (torchjd: `jac_to_grad(params, aggregator)`)" if beside else
           f"; backward ran {len(ran)} times in those steps and reached none of them: the "
           "loss was "
           "computed from copies of them cut from their graph (`.detach()`, "
           "`detach().requires_grad_()`, `torch.no_grad()`; higher's innerloop_ctx with "
           "copy_initial_weights=True or track_higher_grads=False); keep the path from the "
           "loss to the parameters the optimizer holds" if ran else
           "; call backward() (or set `.grad`) before step()")
    n = len({i for st in steps for i in st["trainable"]})
    return [Finding(
        check="no_gradient", severity="error", where=where(steps[0]),
        message=(f"optimizer.step() ran in {steps_named(st['step'] for st in steps)} with no "
                 f"gradient on {'the 1' if n == 1 else f'any of the {n}'} trainable "
                 f"{'parameter' if n == 1 else 'parameters'} it holds: nothing "
                 f"trained{fix}"),
        evidence={"steps": [st["step"] for st in steps], "params": n,
                  "beside_grad": beside})]
