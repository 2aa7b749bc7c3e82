"""Check 2: frozen parameters that move, trainable ones no optimizer holds, ones two hold,
an optimizer holding parameters the model no longer uses, a network no optimizer trains
whose parameters still get gradients."""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Record, Run, steps_named, where
from memledger.doctor.source import call_in_loop
from memledger.units import count, format_bytes


def _were(n: int) -> str:
    return "was" if n == 1 else "were"


def _stepped_together(spans: dict[int, list[int]]) -> set[int]:
    """The optimizers that stepped one parameter in overlapping stretches of the run (in one
    training step at least). One that takes over from another (a new optimizer built when
    layers are unfrozen, the old one dropped or left idle: its last training step before
    the new one's first) is no second optimizer of it."""
    found: set[int] = set()
    items = sorted(spans.items(), key=lambda kv: kv[1][0])
    for k, (a, (_, a_last)) in enumerate(items):
        for b, (b_first, _) in items[k + 1:]:
            if b_first <= a_last:
                found |= {a, b}
    return found


def frozen_moving(run: Run) -> list[Finding]:
    moved: dict[int, set[int]] = {}
    first = None
    for st in run.steps:
        for i in st.get("frozen_moved", []):
            moved.setdefault(i, set()).add(st["step"])
            first = first or st
    if not moved:
        return []
    steps = set().union(*moved.values())
    return [Finding(
        check="frozen_moving", severity="error", where=where(first),
        message=(f"{count(len(moved), 'parameter')} with requires_grad=False "
                 f"({run.names(moved)}) {_were(len(moved))} changed by optimizer.step() in "
                 f"{steps_named(steps)} (weight decay or momentum on a stale .grad); leave them "
                 "out of the optimizer or set their "
                 ".grad to None when freezing"),
        evidence={"params": len(moved), "steps": sorted(steps), "bytes": run.bytes_of(moved)})]


def optimizer_membership(run: Run) -> list[Finding]:
    owners: dict[int, set[int]] = {}
    spans: dict[int, dict[int, list[int]]] = {}   # param -> optimizer -> [first, last]
    where_of: dict[int, dict] = {}
    for st in run.steps:
        where_of.setdefault(st["opt"], st)
        for i in st["params"]:
            owners.setdefault(i, set()).add(st["opt"])
            # training steps (two optimizers that step one after the other in one
            # iteration share it); a record without them, its optimizer step
            t = st.get("train_step", st["step"])
            span_ = spans.setdefault(i, {}).setdefault(st["opt"], [t, t])
            span_[1] = t
    out = []
    shared = [i for i in owners if _stepped_together(spans[i])]
    if shared:
        opts = sorted({o for i in shared for o in _stepped_together(spans[i])})
        out.append(Finding(
            check="two_optimizers", severity="error", where=where(where_of[opts[-1]]),
            message=(f"{count(len(shared), 'parameter')} ({run.names(shared)}) "
                     f"{'is' if len(shared) == 1 else 'are'} in {len(opts)} "
                     "optimizers: each step() updates them again with its own state; give "
                     "every parameter to exactly one optimizer"),
            evidence={"params": len(shared), "optimizers": len(opts),
                      "bytes": run.bytes_of(shared)}))
    # Trainable parameters of a model the optimizers train (same root) that none holds,
    # and that a backward gave a gradient (Note [Parameters no optimizer holds])
    roots = {run.params[i].get("root") for i in owners if i in run.params}
    # by a backward whose gradients a step used (Note [A backward no step used, for its
    # gradients' own sake]); all of them where no step names its backward passes
    used = {n for st in run.steps   # Note [A gradient folded into the step's]
            for n in (*st.get("bw", ()), *st.get("reeval", ()), *st.get("folded", ()))}
    reached = {i for b in run.backwards if not used or b.get("n") in used
               for i in b.get("reached", ())}
    orphans = [i for i, p in run.params.items()
               if p.get("trainable") and i not in owners and p.get("root") in roots
               and p.get("root") is not None and i in reached]
    if orphans and run.steps:
        out.append(Finding(
            check="no_optimizer", severity="warning", where=where(run.steps[0]),
            message=(f"{count(len(orphans), 'trainable parameter')} ({run.names(orphans)}) "
                     f"{'is' if len(orphans) == 1 else 'are'} in no optimizer: backward gives "
                     "them gradients that no optimizer.step() applies; add them to the "
                     "optimizer or set requires_grad=False"),
            evidence={"params": len(orphans), "bytes": run.bytes_of(orphans)}))
    # and the script's own parameters, no module's (Note [A parameter no module holds],
    # trace/doctor_loose.py), reached by such a backward
    loose = [r for r in run.loose if not used or used & set(r["bw"])]
    if loose and run.steps:
        first = loose[0]
        shapes = ", ".join(f"({', '.join(map(str, r['shape']))}) {r['dtype']}"
                           for r in loose[:3]) + (f" and {len(loose) - 3} more"
                                                  if len(loose) > 3 else "")
        n = len(loose)
        out.append(Finding(
            check="no_optimizer", severity="warning",
            where=where(first),
            message=(f"{n} nn.Parameter{'s' if n > 1 else ''} that no module holds "
                     f"({shapes}, {format_bytes(sum(r['bytes'] for r in loose))}) "
                     f"{'are' if n > 1 else 'is'} in no optimizer: the backward here gives "
                     f"{'them gradients' if n > 1 else 'it a gradient'} that no "
                     "optimizer.step() applies, and nothing else changed "
                     f"{'them' if n > 1 else 'it'}; add "
                     f"{'them' if n > 1 else 'it'} to the optimizer's parameters"),
            evidence={"params": n, "bytes": sum(int(r["bytes"]) for r in loose)}))
    return out


# Note [Parameters no optimizer holds]
# A parameter that wants a gradient, in a network an optimizer trains, that no optimizer
# holds, is a bug only when backward gives it one: then the gradient is computed and kept
# for nothing, and the parameter never trains (a head left out of the optimizer). A target
# network held beside the trained one (Stable-Baselines3's SAC keeps `critic_target` in the
# policy with `requires_grad` left on, runs it under `no_grad` and moves it by
# `polyak_update`) gets no gradient and does change: it was reported as "12 trainable
# parameters ... get gradients but never change" (tests/clients/train_sb3.py --mode sac;
# TD3: 18, with `actor_target`). Its `requires_grad` costs nothing, and adding it to an
# optimizer would be the bug. So only the parameters some backward reached count.


# Note [A backward no step used, for its gradients' own sake]
# A backward a script runs for its gradients, not for a step, reaches parameters that no
# optimizer need hold: torch-pruning's Taylor importance (`GroupTaylorImportance`) reads
# each weight's `.grad` from a loss's backward run before `pruner.step()`, which then
# replaces the pruned layers' parameters with smaller ones; the optimizer is made after,
# on the new ones. The replaced parameters (the pruner's graph keeps them alive) were read
# as the model's, "16 trainable parameters (`stem.0.weight`, `stem.1.weight`, `stem.1.bias`
# and 13 more) are in no optimizer: ... add them to the optimizer" (tests/clients/
# train_pruning.py --imp taylor --collect; 39,872 B, none of them the model's any more).
# A parameter counts where a backward whose gradients some step used reached it: a head
# left out of the optimizer is reached by every training backward, so still found.


# Note [Copies made in every step]
# A model rebuilt (or deep-copied) once after its optimizer was made leaves the same
# orphans, reached by backward in every step. higher's `innerloop_ctx(model, opt)` with its
# default `copy_initial_weights=True` makes each task's fast weights from
# `p.clone().detach().requires_grad_()`: new leaves in every step, each reached by that
# step's backward alone, and the meta-optimizer's parameters never get a gradient
# (tests/clients/train_higher.py --copy-initial: 36 orphans over 3 steps, 12 a step). The
# finding said "the model rebuilt, deep-copied or converted by .to()" and "build the
# optimizer from the model you train", which no rebuild explains and no change to the
# optimizer fixes. Where every orphan is reached in one step only, and they span several
# steps, the finding names the copies made in the step instead.
def stale_optimizer(run: Run) -> list[Finding]:
    """An optimizer none of whose parameters ever got a gradient, while parameters that did
    are in no optimizer: it was built on the model's old parameters (the model rebuilt,
    deep-copied, or converted by `.to()` into new Parameter objects after the optimizer was
    made), so the model never trains."""
    reached = {i for b in run.backwards for i in b.get("reached", ())}
    if not reached:
        return []
    held = {i for st in run.steps for i in st["params"]}
    orphans = sorted(i for i in reached if i not in held and run.params.get(i, {}).get(
        "trainable"))
    first: dict[int, dict] = {}
    for st in run.steps:
        first.setdefault(st["opt"], st)
    # and none had a .grad at its steps: master weights whose gradients the script copies
    # in by hand (mixed precision done by hand) get none from backward, yet train
    stale = [st for o, st in first.items()
             if not any(i in reached or s.get("graded", 0)
                        for s in run.steps if s["opt"] == o for i in s["params"])]
    if not orphans or not stale:
        return []
    st = stale[0]
    windows = {i: {b["window"] for b in run.backwards if i in b.get("reached", ())}
               for i in orphans}
    if len(set().union(*windows.values())) > 1 and all(len(w) == 1 for w in windows.values()):
        # Note [Copies made in every step]
        why = ("each step's backward reached new ones (copies of the parameters made in the "
               "step and cut from them: a copy.deepcopy of the model, "
               "`p.detach().requires_grad_()`; higher's innerloop_ctx with its default "
               "copy_initial_weights=True), so their gradients never reach the parameters "
               "the optimizer holds and the model never trains; make the copies with an op "
               "autograd follows (`p.clone()` through torch.func.functional_call; higher: "
               "copy_initial_weights=False)")
    else:
        why = ("it was built on parameters the model no longer uses (the model rebuilt, "
               "deep-copied or converted by .to() after the optimizer was made), so the model "
               "never trains; build the optimizer from the model you train, after copying or "
               "moving it")
    return [Finding(
        check="stale_optimizer", severity="error", where=where(st),
        message=(f"optimizer.step() ({st['cls']}) updates {count(len(st['params']), 'parameter')}"
                 f"{', which never' if len(st['params']) == 1 else ' none of which ever'} "
                 f"got a gradient, while the {len(orphans)} that "
                 f"{'does' if len(orphans) == 1 else 'do'} ({run.names(orphans)}) "
                 f"{'is' if len(orphans) == 1 else 'are'} in no "
                 f"optimizer: {why}"),
        evidence={"optimizer_params": len(st["params"]), "orphans": len(orphans),
                  "bytes": run.bytes_of(orphans)})]


def wasted_gradients(run: Run) -> list[Finding]:
    """A network no optimizer trains (a distillation teacher, a loss network) whose
    parameters backward gives gradients that nothing reads: their `.grad` tensors take memory
    and backward computes them, for nothing. Its eval mode is not the bug (eval_mode leaves
    it alone); freezing it is the fix. A script that reads those gradients (copies them into
    master weights, logs their norm) uses them: not reported."""
    out = []
    for root, idx in run.untrained_roots().items():
        if any(run.params.get(i, {}).get("grad_read") for i in idx):
            continue
        net = run.nets.get(root)
        steps = sorted({b["window"] for b in run.backwards if set(b.get("reached", ())) & set(idx)})
        first = next(b for b in run.backwards if set(b.get("reached", ())) & set(idx))
        evalm = net is not None and not net.get("training", True)
        through = net is not None and net.get("input_grad")
        name = f"`{net['var']}`, a network " if net is not None and net.get("var") else \
            "a network "
        fix = ("call requires_grad_(False) on it (its input's gradient still flows through it)"
               if through else
               "call requires_grad_(False) on it, or run its forward under torch.no_grad()")
        zeroed = {run.params.get(i, {}).get("zeroed_by") for i in idx}
        if None not in zeroed:   # Note [A zero_grad reads no gradient] (doctor_probe.py)
            why = (f"an optimizer ({', '.join(sorted(zeroed))}) holds them and its zero_grad() "
                   "clears them each step, but its step() is never called")
            fix = "call that optimizer's step() after backward"
        else:
            why = "a teacher or loss network left trainable?"
            if not evalm:   # a loss with weights of its own (class centres, proxies) learns
                fix += ("; or, if they are meant to learn (a loss with weights of its own), "
                        "give them to an optimizer")
        out.append(Finding(
            check="wasted_gradients", severity="warning", where=where(net or first),
            message=(f"backward computes and stores gradients for {count(len(idx), 'parameter')} "
                     f"({run.names(idx)}, {format_bytes(run.bytes_of(idx))}) of {name}"
                     f"{'in eval mode ' if evalm else ''}that no optimizer updates, in "
                     f"{steps_named(steps)}, and nothing reads them: memory and compute spent for "
                     f"nothing ({why}); {fix}"),
            evidence={"params": len(idx), "bytes": run.bytes_of(idx), "steps": steps,
                      "eval_mode": evalm, "zeroed_by": sorted(z for z in zeroed if z)}))
    return out


# Note [An optimizer built again every step]
# `opt = torch.optim.Adam(model.parameters())` inside the loop: each step's optimizer is
# new, finds its state empty and builds it, so Adam's moments start over every step (its
# first, bias-corrected step, about lr * sign(grad), every time) and momentum never
# accumulates; the loss still goes down, and no other check saw a thing (the parameters
# move, each optimizer steps once). The probe notes, per step, whether the optimizer found
# its state empty for its parameters and left it filled (`state_built`, Note [A step that
# builds state] in trace/doctor_probe.py). Such a step over parameters an earlier step
# already updated started them over. Once is a phase change (an optimizer built when
# layers are unfrozen); at every step after the first it is a loop that builds its
# optimizer inside itself. A warning: Reptile-style meta-learning resets an inner
# optimizer per task on purpose. An optimizer with no state (plain SGD) builds nothing,
# and building it anew costs nothing: no finding.
def optimizer_reset(run: Run) -> list[Finding]:
    """Optimizers whose state started over at two or more steps, for parameters earlier
    steps had updated."""
    seen: set[int] = set()
    reset = []
    for st in sorted(run.steps, key=lambda s: s["step"]):
        if st.get("state_built") and seen.intersection(st["params"]):
            reset.append(st)
        seen.update(st["params"])
    if len(reset) < 2:
        return []
    st = reset[0]
    line = call_in_loop(st["file"], st["cls"])
    return [Finding(
        check="optimizer_reset", severity="warning",
        where=Where(file=st["file"], line=line) if line else where(st),
        message=(f"{st['cls']}'s state started over in {steps_named(s['step'] for s in reset)}: "
                 f"each step's optimizer is a new one (built inside the loop?), so its "
                 f"{count(len(st['params']), 'parameter')} "
                 f"lose{'s' if len(st['params']) == 1 else ''} what it keeps between steps "
                 "(moments, momentum) and every update is a first one; build the optimizer once, "
                 "before the loop (unless the reset is meant, as a meta-learning inner "
                 "loop's)"),
        evidence={"steps": [s["step"] for s in reset], "params": len(st["params"])})]


def detached_in_place(run: Run) -> list[Finding]:
    """Parameters an optimizer holds that `.detach_()` froze mid-run (Note [A parameter
    detached in place] in trace/doctor_probe.py): one warning per line."""
    held = {int(i) for st in run.steps for i in st["params"]}
    by_line: dict[tuple, list[Record]] = {}
    for r in run.detached:
        if any(int(i) in held for i in r["params"]):
            by_line.setdefault((r["file"], r["line"]), []).append(r)
    out = []
    for recs in by_line.values():
        idx = sorted({int(i) for r in recs for i in r["params"] if int(i) in held})
        steps = {int(r["window"]) for r in recs}
        out.append(Finding(
            check="detached_parameter", severity="warning", where=where(recs[0]),
            message=(f"{count(len(idx), 'parameter')} an optimizer trains ({run.names(idx)}) "
                     f"{_were(len(idx))} "
                     f"detached in place (`.detach_()`) in {steps_named(steps)}: their "
                     "requires_grad is off from then on, so they get no gradient and never "
                     "train again; use `.detach()`, a new tensor, where "
                     "the forward wants the weight without its gradient, or freeze them "
                     "with requires_grad_(False) outside the forward if that is meant"),
            evidence={"params": len(idx), "steps": sorted(steps),
                      "bytes": run.bytes_of(idx)}))
    return out
