"""Checks 1 and 3: parameters the loss did not reach, and gradients leaking across steps.

cut_graph / unused_parameter: in a step where the loss reached some trainable parameters
of an optimizer, the others got no gradient. The probe's `cut` records say which op cut
the path to which parameters (the first cut, in program order, whose detached graph held
them); without one, backward reached the parameter and computed None for it (a custom
Function), or its module did not run, or its output never reached the loss. A parameter
whose gradient the script took itself (`torch.autograd.grad`, TRPO's natural gradient) was
reached, in every step of the window. Without a cut,
a parameter that got a gradient in another step of the window, or whose module is an
element of a ModuleList / ModuleDict not chosen in that step while a sibling was (a
mixture of experts' unrouted expert, a task's head, LayerDrop), is chosen by the data: not
reported.

grad_leak: a backward pass found a parameter's `.grad` still holding gradient that an
optimizer step had already consumed (Note [Which backward reached a parameter] in
memledger/trace/doctor_probe.py). Deliberate accumulation (K backward passes, one step,
then zero) never produces a leak record.
"""

from __future__ import annotations

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import Run, steps_named, where
from memledger.units import count

CUT_OPS = {
    "detach": ("`.detach()`", "remove the detach (or detach only what you log)"),
    "data": ("`.data`", "use the tensor itself, not `.data`"),
    "numpy": ("a numpy round trip (`.numpy()`)", "keep the computation in torch"),
    "no_grad": ("an op under `torch.no_grad()`", "run this part of the forward with grad "
                "enabled"),
    "checkpoint": ("a reentrant `checkpoint` none of whose inputs require grad",
                   "use checkpoint(..., use_reentrant=False), or make its input require grad "
                   "(model.enable_input_require_grads() for a frozen embedding)"),
}


def cut_graph(run: Run) -> list[Finding]:
    cut_of: dict[tuple[int, int], dict] = {}
    for c in run.cuts:
        if c.get("around"):   # the graph went on around it (Note [A cut the graph goes
            continue          # around] in trace/doctor_probe.py)
        for i in c["params"]:
            was = cut_of.setdefault((c["window"], i), c)
            if c.get("frozen") and not was.get("frozen") and was["op"] == "no_grad":
                # Note [A part the model runs frozen] (trace/doctor_probe.py): the training
                # forward runs it frozen; a validation under no_grad before it read it too
                cut_of[(c["window"], i)] = c
    groups: dict[tuple, dict] = {}
    first = run.first_steps()
    # a parameter that got a gradient in another step of the window: its module runs, or
    # reaches the loss, depending on the data (a branch, a task, an expert): not unused
    ever = {int(i) for st in run.steps for i in st["accum"]}
    # a gradient the script took itself (`torch.autograd.grad`: Note [A gradient the script
    # takes itself] in trace/doctor_probe.py): the loss reached it
    ever |= {int(i) for st in run.steps for i in st.get("taken", ())}
    for st in run.steps:
        got = {int(i) for i in st["accum"]}
        if not got:
            continue   # the loss reached none of this optimizer's parameters: nothing to compare
        late = set(st["late"]) if st["step"] in first else set()
        taken = set(st.get("taken", ()))
        for i in st["trainable"]:
            if i in got or i in late or i in taken or run.params.get(i, {}).get("empty"):
                continue   # Note [A parameter with no elements]
            # reached by backward with None: not cut (a Function's forward runs its ops
            # under no_grad, which looks like a cut)
            c = None if i in st.get("none_grad", ()) else cut_of.get((st["step"], i))
            if c is not None and c["op"] == "no_grad" and i in ever:
                c = None   # Note [A parameter with no elements]
# A feature switched off by its size keeps its parameter, empty: mmdit's `MMDiT` makes
# `register_tokens = nn.Parameter(torch.zeros(num_register_tokens, dim_image))` whatever
# the count and reads it only when the count is above 0. With none, the doctor warned
# "2 trainable parameters (`net.register_tokens`, ...) got no gradient ...: their
# modules ran but the output never reached the loss" (tests/clients/train_mmdit.py
# --model mmdit): a parameter of 0 elements holds nothing to learn and nothing to waste
# (0 bytes), whatever its gradient. The probe marks such a parameter `empty` (a lazy
# module's parameter before its first forward is not: its bytes come later), and neither
# cut_graph nor unused_parameter names it. tests/doctor/dead_stabilized.py --empty.


# Note [A no_grad read of a parameter that trains in another step]
            if c is not None and c.get("carried") and i in ever:
                c = None   # Note [A state carried in from an earlier step]
            if c is None and (i in ever or i in st.get("routed", ())):
                continue   # chosen by the data (above), or an unrouted expert (the probe)
            if i in st.get("none_grad", ()):
                key = ("none_grad", st["file"], st["line"])
            elif c is not None:
                key = ("cut", c["op"], c["file"], c["line"], bool(c.get("frozen")))
            elif i in st.get("ran_without", ()):
                key = ("ran_without", st["file"], st["line"])
            elif i in st["not_run"]:
                key = ("not_run", st["file"], st["line"])
            else:
                key = ("unreached", st["file"], st["line"])
            g = groups.setdefault(key, {"params": set(), "steps": set(), "others": 0,
                                        "where": c if c is not None else st})
            g["params"].add(i)
            g["steps"].add(st["step"])
            g["others"] = max(g["others"], len(got))
    return [_cut_finding(run, key, g) for key, g in groups.items()]


# Note [A no_grad read of a parameter that trains in another step]
# A parameter read under `torch.no_grad()` in a step where it got no gradient was blamed on
# that read, even when it got gradients in other steps: compressive-transformer-pytorch's
# memory compression (`compress_mem_fn.conv`) runs only once a segment has memory, so the
# first segment of each batch gives it no gradient (chosen by the data, not reported), and
# a validation pass under no_grad between batches reads it: "4 trainable parameters
# (`...compress_mem_fn.conv.weight`, ...) got no gradient in step 3 ...: the path from the
# loss was cut by an op under `torch.no_grad()`; run this part of the forward with grad
# enabled" (an error, which stops `compare`), at the validation line
# (tests/clients/train_compressive.py --validate). A forward under no_grad that really cuts
# a parameter off the loss cuts it in every step; one that trains in another step of the
# window is chosen by the data, with or without a no_grad read beside it. `.detach()`,
# `.data` and the other cuts keep their blame: they sit in the training forward's path.


# Note [A state carried in from an earlier step]
# Truncated back-propagation through time cuts a recurrent state where a step begins
# (`h = h.detach()`, tests/doctor/carried.py --fixed) so that the step's backward stops
# at the step's start. Where the first state is learned (memformer's `memory_slots`,
# repeated into the memory of a stream's first segment; carried.py --learned), that
# parameter trains in the first step and reaches the loss of no later one, whose memory
# is the one carried: the state made in step 1, detached at step 2's start, held it. The
# probe counts a cut in the window it runs in, so the detach at the start of step 2 was
# blamed: "1 trainable parameters (`memory_slots`) got no gradient in step 2 while 70
# others did: the path from the loss was cut by `.detach()`; remove the detach" (an
# error, which stops `compare`) on tests/clients/train_memformer_mlm.py --mode bptt
# --carry keep --accum 2, where removing it makes step 2's backward fail; the same
# loop detaching at the end of step 1 (--carry detach) read nothing. A cut of a tensor
# whose graph node was made before the window began (autograd numbers its nodes in the
# order made: the probe takes the next number at each step boundary) is marked `carried`:
# it cut no path of this window's forward, and a parameter that got a gradient in another
# step is chosen by the data (when the stream starts), as above. A carried cut of a
# parameter that never got one keeps its blame.


# Note [A loss with no history]
# A forward run entirely under `torch.no_grad()` (a `@torch.no_grad()` left on the function
# that computes the training loss, an evaluation helper reused for training) gives a loss
# with no autograd history, and its backward raises at once ("element 0 of tensors does
# not require grad and does not have a grad_fn"): the doctor said only that, as the script
# died before any step it checks. The probe had already seen the cut (ops under no_grad
# that read parameters: `cut` records); the backward's record now says it failed on a
# tensor with no history, and the first cut of that window is named as why.
def no_history(run: Run) -> list[Finding]:
    out = []
    for b in run.backwards:
        if not b.get("no_history"):
            continue
        cuts = [c for c in run.cuts if c["window"] == b["window"]]
        what, fix = CUT_OPS.get(cuts[0]["op"], (cuts[0]["op"], "")) if cuts else ("", "")
        idx = sorted({i for c in cuts if c["op"] == cuts[0]["op"] for i in c["params"]})
        why = (f": the forward reached the parameters only through {what} "
               f"({count(len(idx), 'parameter')}: {run.names(idx)}); {fix}"
               if cuts else ": nothing it was computed from requires grad; compute it from "
               "the model's output with grad enabled")
        out.append(Finding(
            check="cut_graph", severity="error", where=where(cuts[0] if cuts else b),
            message=(f"the loss backward() was called on at line {b.get('line', 0)} has no "
                     f"autograd history, so backward raised ({b['no_history']}){why}"),
            evidence={"window": b["window"], "params_without_grad": len(idx)}))
        break   # the script stopped there
    return out


def _cut_finding(run: Run, key: tuple, g: dict) -> Finding:
    idx, steps = g["params"], g["steps"]
    head = (f"{count(len(idx), 'trainable parameter')} ({run.names(idx)}) got no gradient "
            f"in {steps_named(steps)} while {count(g['others'], 'other')} did")
    evidence = {"params_without_grad": len(idx), "params_with_grad": g["others"],
                "bytes_without_grad": run.bytes_of(idx), "steps": sorted(steps)}
    if key[0] == "cut" and key[4]:   # Note [A part the model runs frozen] (trace/doctor_probe.py)
        return Finding(check="cut_graph", severity="warning", where=where(g["where"]),
                       message=f"{head}: the model runs their modules in eval mode under "
                       "`torch.no_grad()` inside its training forward (a part it keeps "
                       "frozen, as a pretrained encoder is); if that is meant, leave them out "
                       "of the optimizer (or `requires_grad_(False)`), else run that part "
                       "with grad enabled", evidence=evidence)
    if key[0] == "cut":
        what, fix = CUT_OPS.get(key[1], (key[1], "keep the path to the loss differentiable"))
        return Finding(check="cut_graph", severity="error", where=where(g["where"]),
                       message=f"{head}: the path from the loss was cut by {what}; {fix}",
                       evidence=evidence)
    if key[0] == "none_grad":
        msg = (f"{head}: backward reached them but computed no gradient (None): a custom "
               "autograd.Function whose backward returns None for them, or a hook that drops "
               "it; return their gradient, or freeze them")
    elif key[0] == "ran_without":
        # Note [Parameters a call ran without] (trace/doctor_probe.py)
        msg = (f"{head}: their modules ran, but with other tensors in their place "
               "(`torch.func.functional_call`, torch.nn.utils.stateless), so these were "
               "never read; hand them to the call, or leave them out of the optimizer")
    elif key[0] == "not_run":
        # a module run through another method or a direct `.forward()` is no module call
        # either (Note [Modules run through another method], replay/policies.py): its
        # parameters read as Python numbers (`.item()`) look the same
        msg = (f"{head}: their modules did not run in that step, or not as module calls "
               "(through another method or a direct `.forward()`, with the parameters read "
               "outside the graph, as `.item()` reads them); if that is intended (a branch "
               "not taken, a setting kept as a parameter) ignore this, else call them in "
               "the forward")
    else:
        # Note [A parameter its module never read]
        # A module can run, its output reach the loss, and still never read a parameter of
        # its own: x-unet's first cross-stage attention residual (`XAttnRes`, handed an
        # empty `history`) returns its input before its `pseudo_query` is read. The probe
        # sees the module's call and no gradient, as for an output dropped from the loss,
        # and cannot tell the two apart without watching every op's inputs; the doctor said
        # "their modules ran but the output never reached the loss", false there. It names
        # both now (tests/doctor/early_return.py).
        msg = (f"{head}: their modules ran but the output never reached the loss, or their "
               "forward never read them (a branch that returns before them, as x-unet's "
               "first XAttnRes returns its input when handed no history); use them in the "
               "loss, or set requires_grad=False and leave them out of the optimizer")
    return Finding(check="unused_parameter", severity="warning", where=where(g["where"]),
                   message=msg, evidence=evidence)


def _by_line(records: list[dict], step=lambda r: r["window"]) -> dict[tuple, dict]:
    """{(file, line): {"params": parameter indices, "steps": steps}} of per-parameter
    records: one finding per script line."""
    groups: dict[tuple, dict] = {}
    for r in records:
        g = groups.setdefault((r["file"], r["line"]), {"params": set(), "steps": set()})
        g["params"].add(r["i"])
        g["steps"].add(step(r))
    return groups


def grad_leak(run: Run) -> list[Finding]:
    out = []
    for (file, line), g in _by_line(run.leaks).items():
        idx = g["params"]
        # Note [Gradients an optimizer takes outside its step] (trace/doctor_probe.py)
        by_state = any(r.get("by") == "state" for r in run.leaks
                       if (r["file"], r["line"]) == (file, line))
        used = ("the gradient the optimizer already took into its state outside step() "
                "(as a Hessian refresh does); call optimizer.zero_grad() after that update"
                if by_state else "the gradient an earlier optimizer.step() used; call "
                "optimizer.zero_grad() once per step")
        out.append(Finding(
            check="grad_leak", severity="error", where=Where(file=file, line=line),
            message=(f"gradients leak across optimizer steps: {count(len(idx), 'parameter')} "
                     f"({run.names(idx)}) entered the backward of {steps_named(g['steps'])} "
                     f"still holding {used}"),
            evidence={"params": len(idx), "steps": sorted(g["steps"]),
                      "bytes": run.bytes_of(idx)}))
    return out


def mixed_gradient(run: Run) -> list[Finding]:
    """A step used a gradient summed over backward passes taken at different weights: the
    parameters changed in place between them, outside any step (Note [Gradients of two
    weights] in memledger/trace/doctor_probe.py)."""
    out = []
    for (file, line), g in _by_line(run.mixed, lambda r: r.get("step", r["window"])).items():
        idx = g["params"]
        out.append(Finding(
            check="mixed_gradient", severity="error", where=Where(file=file, line=line),
            message=(f"{count(len(idx), 'parameter')} ({run.names(idx)}) changed in place "
                     "between two backward passes whose gradients optimizer.step() then used "
                     "together, in "
                     f"{steps_named(g['steps'])}: the update is a gradient at the old weights "
                     "plus one at the new; zero the gradient once it has been used (SAM's "
                     "first_step(zero_grad=True)) or move the weights only after the step"),
            evidence={"params": len(idx), "steps": sorted(g["steps"]),
                      "bytes": run.bytes_of(idx)}))
    return out
