"""Check 6: tensors that carry autograd history across steps (optimizer steps, or as
`--steps-by` counts them).

The probe lists, at each step boundary, the live tensors whose graph reaches a graph that
was alive at the previous boundary (Note [Cross-step retention] in
memledger/trace/doctor_probe.py). Grouped by the variable holding them: `total_loss` (one
tensor, its graph longer every step) or `losses` (one more tensor every step). History
that grows between boundaries is an error (it grows without bound); history merely kept
is a warning. A variable holding the newest step's graph beside older ones grows (Note [A
variable that takes every step's graph]). A parameter or buffer of a module with history
(`ema.0.weight`: an EMA update outside `torch.no_grad()`) is an error at once: it is no
leaf any more and the update adds to its graph every step; the finding points at the op
that first gave it history.
"""

from __future__ import annotations

import math
from pathlib import Path

from memledger.doctor.findings import Finding, Where
from memledger.doctor.records import steps_named
from memledger.doctor.source import (accumulated_value, accumulation_line,
                                     accumulation_target, feeds_itself, holds_items,
                                     names_read_at, rebinding_line, state_fed_back)
from memledger.units import count, format_bytes


def cross_step_retention(run) -> list[Finding]:
    groups: dict[tuple[str, str], dict[int, dict]] = {}
    retained = _fed_back(run.retained)
    # Note [A variable that takes every step's graph]: the graphs made in a boundary's own
    # step that a variable found holding older ones holds too
    fresh = [r for r in retained if r.get("fresh")]
    retained = [r for r in retained if not r.get("fresh")]
    for r in retained:
        key = (r["var"] or r["name"], r["file"])
        per = groups.setdefault(key, {}).setdefault(r["step"], {"bytes": 0, "nodes": 0,
                                                                "tensors": 0})
        per["bytes"] += int(r["bytes"])
        per["nodes"] += int(r["nodes"])
        per["tensors"] += 1
    out = []
    generic: list[tuple[str, Finding]] = []   # the findings of the plain rule, by variable
    fed: dict[tuple[str, int], str] = {}      # (file, line) -> the state it feeds back
    for (var, file), per in groups.items():
        steps = sorted(per)
        nodes = [per[s]["nodes"] for s in steps]
        nbytes = [per[s]["bytes"] for s in steps]
        tensors = [per[s]["tensors"] for s in steps]
        grows = len(steps) > 1 and (nodes[-1] > nodes[0] or tensors[-1] > tensors[0])
        recs = [r for r in retained if (r["var"] or r["name"], r["file"]) == (var, file)]
        new = [r for r in fresh if (r["var"], r["file"]) == (var, file)]
        holding = _held(per, new, steps)
        more = _growth(holding, new, steps)
        grows = grows or more[0] > 0
        spent = all(r.get("backwarded") for r in recs)
        store = [r for r in recs if r.get("store")]
        if store:   # Note [A store that saved-tensor hooks fill] (trace/doctor_retention.py)
            out.append(_store_finding(var, file, store))
            continue
        state = [r for r in recs if r.get("state")]
        if state:
            out.append(_state_finding(var, file, state, steps, per, _steps(run)))
            continue
        carried = [r for r in recs if r.get("carried")]
        if carried:
            out.append(_carried_finding(var, file, carried, _steps(run)))
            continue
        kept = [r for r in recs if r.get("kept_saved")]
        if kept and not grows:
            out.append(_kept_finding(var, kept, _steps(run)))
            continue
        held = [r for r in recs if r.get("ctx_bytes")]
        if spent and not grows and held:
            out.append(_ctx_finding(var, file, held, _steps(run), _at(recs)))
            continue
        side = [r for r in recs if r.get("side_saved")]
        if side and not grows:
            out.append(_side_finding(var, file, side, _steps(run), _at(recs)))
            continue
        if spent and not grows:   # a loss kept after its backward until the next replaces it
            continue
        line = accumulation_line(file, var, _at(recs))
        # Note [The tensor an accumulation adds] (doctor/source.py)
        added = accumulated_value(file, line, var)
        target = accumulation_target(file, line, var) if added else None
        if state_fed_back(file, line, var):   # Note [A state a call hands back]
            fix = f"detach it where the step begins " \
                f"({_detach_advice(var, [str(r['name']) for r in recs])})"
            fed[(file, line)] = var
        elif target and holds_items([str(r["name"]) for r in recs], target):
            # Note [What the line adds holds the tensors] (doctor/source.py)
            fix = f"keep each tensor {added} holds detached instead " \
                f"(`tuple(x.detach() for x in {added})`)"
        elif added and _one_number_each(recs):
            fix = f"accumulate {added}.item() or {added}.detach() instead"
        elif added:   # Note [A kept tensor of several numbers]
            fix = f"accumulate {added}.detach() instead"
        else:
            fix = "keep what that line adds detached instead (`.item()` of a number, " \
                "`.detach()` of a tensor)"
        h_tensors, h_bytes, h_nodes, h_saved = holding
        saves = f", {format_bytes(h_saved[-1])} saved for backward" \
            if h_saved and h_saved[-1] else ""
        msg = (f"`{var}` carries autograd history across {_steps(run)} (at the end of "
               + _range_named(steps) +
               f": {count(h_tensors[-1], 'tensor')}, {format_bytes(h_bytes[-1])}, a graph of "
               f"{count(h_nodes[-1], 'node')}"
               + (f", up from {h_nodes[0]}" if h_nodes[-1] > h_nodes[0] else "")
               + saves + _growth_said(more) + f"): every step's graph stays reachable; {fix}")
        evidence = {"steps": steps, "bytes_per_step": nbytes, "nodes_per_step": nodes,
                    "tensors_per_step": tensors}
        if new:   # Note [A variable that takes every step's graph]
            evidence.update(held_tensors_per_step=h_tensors, held_bytes_per_step=h_bytes)
        if h_saved:
            evidence.update(graph_saved_per_step=h_saved)
        if new and more[0] > 0:   # (the carried counts say it where nothing is fresh)
            evidence.update(tensors_more=more[0], bytes_more=more[1], over_steps=more[2])
            if more[3] is not None:
                evidence.update(saved_more=more[3])
        out.append(Finding(
            check="cross_step_retention", severity="error" if grows else "warning",
            where=Where(file=file, line=line), message=msg, evidence=evidence))
        generic.append((var, out[-1]))
    return _beside_a_fed_state(out, generic, fed)


def _beside_a_fed_state(out: list[Finding], generic: list[tuple[str, Finding]],
                        fed: dict[tuple[str, int], str]) -> list[Finding]:
    """Leave out the findings of the names bound beside a state fed back by the same line
    (`out` of `out, h = model(x, h)`: its graph reaches the older steps' through `h`, and
    detaching `h` ends both); the state's finding names them (Note [A state a call hands
    back], doctor/source.py)."""
    beside: dict[tuple[str, int], list[str]] = {}
    drop = set()
    for var, f in generic:
        key = (f.where.file, f.where.line)
        if key in fed and fed[key] != var:
            beside.setdefault(key, []).append(var)
            drop.add(id(f))
    plain = {id(f) for _, f in generic}
    kept = []
    for f in out:
        if id(f) in drop:
            continue
        names = beside.get((f.where.file, f.where.line))
        if names and id(f) in plain:
            also = ", ".join(f"`{n}`" for n in names)
            f = f.model_copy(update={"message": f.message.replace(
                "): every step's graph stays reachable;",
                f"; {also}, bound beside it, reaches the same graphs through it): every "
                "step's graph stays reachable;", 1)})
        kept.append(f)
    return kept


# Note [A variable that takes every step's graph]
# The probe lists, at each boundary, the tensors a variable holds whose graph reaches one
# alive at the boundary before (`tensors_per_step`), and beside them, marked `fresh`, the
# graphs the same variable holds that were made since, with the bytes all its graphs save
# for backward (Note [What a variable holds of the newest step], trace/doctor_retention.py).
# What the variable holds (`held_*_per_step`, `graph_saved_per_step`, said in the message)
# is both. It grows, an error, where what it holds grew between the first and the last
# boundary that found it (`tensors_more`, `bytes_more`, `saved_more` over `over_steps`;
# said per step where the steps divide them), or, found at one boundary only, where it
# holds the newest step's graph beside older ones: it took one more graph in the last step
# and let go of none it held at the boundary before. A variable that keeps one step's graph
# at a time (`last = out`) never holds two steps' graphs at once; a buffer bounded to its
# last k graphs reads as growing while it fills (three steps cannot tell it from a list),
# and as kept (a warning) once two boundaries see it full: the rule the carried graphs'
# counts already followed. Before (hunt49m's "Seen, left alone"): a list appended an
# evaluation's graph after each step's boundary read "1 tensor(s)", a warning, at 3 steps,
# where it held 2, grew by one a step, and each graph kept its forward's activations.
def _held(per: dict, new: list, steps: list[int]
          ) -> tuple[list[int], list[int], list[int], list[int]]:
    """Per step of `steps`: the tensors, bytes and graph nodes the variable holds, its
    older graphs (`per`) and the newest step's (`new`, the `fresh` records) together, and
    the bytes its graphs save for backward (empty unless the probe read them at every
    one of those boundaries)."""
    out: tuple[list[int], list[int], list[int], list[int]] = ([], [], [], [])
    for s in steps:
        mine = [r for r in new if r["step"] == s]
        out[0].append(per[s]["tensors"] + len(mine))
        out[1].append(per[s]["bytes"] + sum(int(r["bytes"]) for r in mine))
        out[2].append(per[s]["nodes"] + sum(int(r["nodes"]) for r in mine))
        saved = [int(r["graph_saved"]) for r in mine if "graph_saved" in r]
        out[3].append(saved[0] if saved else -1)
    if -1 in out[3]:
        out[3].clear()
    return out


def _growth(held: tuple, new: list, steps: list[int]) -> tuple[int, int, int, int | None]:
    """(tensors, bytes, over how many steps, bytes its graphs save, None: unread) the
    variable's holding grew by, from the boundaries that found it (Note [A variable that
    takes every step's graph])."""
    tensors, nbytes, _, saved = held
    if len(steps) > 1:
        return (tensors[-1] - tensors[0], nbytes[-1] - nbytes[0], steps[-1] - steps[0],
                saved[-1] - saved[0] if saved else None)
    last = [r for r in new if r["step"] == steps[-1]]
    read = [r for r in last if "graph_saved" in r]
    return (len(last), sum(int(r["bytes"]) for r in last), 1,
            int(read[0]["graph_saved"]) - int(read[0]["older_saved"]) if read else None)


def _growth_said(more: tuple[int, int, int, int | None]) -> str:
    tensors, nbytes, over, saved = more
    if tensors <= 0:
        return ""
    each = over == 1 or all(x % over == 0 for x in (tensors, nbytes, saved or 0))
    k = over if each else 1
    whose = "its graph saves" if tensors == k else "their graphs save"
    what = f"{count(tensors // k, 'tensor')}, {format_bytes(nbytes // k)}" + (
        f", and the {format_bytes(saved // k)} {whose}" if saved else "")
    return ("; each step adds " if each else f"; {over} steps added ") + what


def _state_finding(var: str, file: str, recs: list, steps: list, per: dict,
                   boundaries: str) -> Finding:
    """Parameters or buffers of the module `var` that carry autograd history."""
    names = sorted({r["name"] for r in recs})
    kinds = sorted({r["state"] for r in recs})
    line = next((int(r["line"]) for r in recs if r.get("line")), 0) or \
        accumulation_line(file, var)
    shown = ", ".join(f"`{n}`" for n in names[:3]) + (
        f" and {len(names) - 3} more" if len(names) > 3 else "")
    last = per[steps[-1]]
    span = "(at the end of " + _range_named(steps)
    failed = next((r["failed"] for r in recs if r.get("failed")), "")
    if failed or (kinds == ["buffer"] and not any(r.get("line") for r in recs)):
        # Note [A backward that fails through an earlier step] (trace/doctor_retention.py):
        # no in-place op gave them history; the module's forward replaced them by tensors
        # of its graph, which the next step's forward then read
        when = (f"into step {steps[-1]}, whose backward then failed ({failed})" if failed
                else span + ")")
        why = ("the module keeps tensors its forward made (a recurrent or spiking layer's "
               "hidden state) from one batch to the next, so each batch's graph chains onto "
               "the last one's; reset or detach that state before each batch's forward "
               "(snntorch: utils.reset(net))")
    else:
        when = span + f": a graph of {last['nodes']} nodes)"
        why = ("they were updated in place outside torch.no_grad() from tensors that require "
               "grad (an EMA or momentum-encoder update?), so they are no leaves and their "
               "graph grows every step; do the update under torch.no_grad()")
    return Finding(
        check="cross_step_retention", severity="error", where=Where(file=file, line=line),
        message=(f"{count(len(names), '/'.join(kinds))} of `{var}` ({shown}) "
                 f"{'carries' if len(names) == 1 else 'carry'} autograd "
                 f"history across {boundaries} {when}: {why}"),
        evidence={"steps": steps, "tensors": len(names), "bytes_per_step":
                  [per[s]["bytes"] for s in steps], "nodes_per_step":
                  [per[s]["nodes"] for s in steps]})


# Note [The value backwarded carries nothing]
# The carriers are told apart from the other variables that reach the old graph by the
# operation they hold (Note [A variable that carried the graph into a failed backward],
# trace/doctor_retention.py), and a loss is often made by the same operation as the state
# it reads, or is that state: torchmd-net's LNNP smooths each loss by an EMA, `loss = a *
# loss + (1 - a) * ema[name]`, and with `ema[name] = loss` kept undetached
# (tests/clients/train_torchmdnet.py --ema-no-detach) step 2's graph enters step 1's
# through an `AddBackward0`, output 0, the node of the stored EMA; the script's `loss`,
# the backward's root, is an `AddBackward0` output 0 too (the same tensor as `ema['y']`
# with energies alone), and `loss = loss + ...` reads itself in the file, which is what
# `_fed_back` keeps: the doctor said "`loss` carried step 1's autograd history into step
# 2 ...; detach it where the step begins (`loss = loss.detach()`)", a fix that changes
# nothing (tests/doctor/carried.py --cell smooth: `smooth["loss"] = loss`). The value a
# backward starts from is what this step computed to train on, not what the next step
# reads: a variable that the failed backward's own line reads (`loss.backward()`, `(loss /
# accum).backward()`) is no carrier where another one is left. Where none is (a state
# backwarded itself), it stays.
def _fed_back(retained: list) -> list:
    """The records less the carriers that only hold the carried state (`out = state`)
    where another is bound from a value that reads it (`state = cell(x, state)`: Note [A
    variable that carried the graph into a failed backward], trace/doctor_retention.py),
    and less the value the failed backward started from (Note [The value backwarded
    carries nothing])."""
    carried = [r for r in retained if r.get("carried")]
    root = [r for r in carried if r.get("backward_at") and r["backward_at"][0] == r["file"]
            and r["var"] in names_read_at(*r["backward_at"])]
    if root and len(root) < len(carried):
        retained = [r for r in retained if r not in root]
        carried = [r for r in carried if r not in root]
    fed = [r for r in carried if feeds_itself(r["file"], r["var"])]
    if not fed or len(fed) == len(carried):
        return retained
    return [r for r in retained if not r.get("carried") or r in fed]


def _carried_finding(var: str, file: str, recs: list, boundaries: str) -> Finding:
    """A variable of the script that carried one step's graph into the next, whose backward
    then failed (Note [A variable that carried the graph into a failed backward] in
    memledger/trace/doctor_retention.py)."""
    step = max(int(r["step"]) for r in recs)
    names = sorted(dict.fromkeys(r["name"] for r in recs))
    items = "" if names == [var] else " (" + ", ".join(f"`{n}`" for n in names) + ")"
    nbytes = sum(int(r["bytes"]) for r in recs)
    fix = _detach_advice(var, names)
    return Finding(
        check="cross_step_retention", severity="error",
        where=Where(file=file, line=rebinding_line(file, var)),
        message=(f"`{var}`{items} carried step {step - 1}'s autograd history into step "
                 f"{step}, whose backward then failed ({recs[0]['failed']}): a tensor one "
                 f"step computes and the next reads again (a recurrent hidden state) chains "
                 f"their graphs across {boundaries}; detach it where the step begins "
                 f"({fix})"),
        evidence={"steps": [step], "tensors": len(names), "bytes_per_step": [nbytes],
                  "names": names})


def _detach_advice(var: str, names: list[str]) -> str:
    """How to detach a state `var` carries into the next step, by the names of what it
    holds (`h`; `hidden[0]`, `hidden[1]`; `cache['k']`)."""
    names = sorted(dict.fromkeys(names))
    keyed = all(n.startswith(f"{var}[") and n[len(var) + 1:len(var) + 2] in ("'", '"')
                for n in names)
    return f"`{var} = {var}.detach()`" if names == [var] else \
        f"each tensor it holds, `{var}[k] = {var}[k].detach()` for each key k" if keyed else \
        f"each tensor it holds, `{var} = tuple(x.detach() for x in {var})`"


def _kept_finding(var: str, recs: list, boundaries: str) -> Finding:
    """A backward root kept past the step whose backward retained its graph (Note [A graph
    kept by retain_graph] in memledger/trace/doctor_retention.py)."""
    steps = sorted({int(r["step"]) for r in recs})
    per = [sum(max(0, int(r["kept_saved"])) for r in recs if int(r["step"]) == s)
           for s in steps]
    known = all(int(r["kept_saved"]) >= 0 for r in recs)
    what = f"the {format_bytes(per[-1])} of tensors its graph saved for backward" if known \
        else "the tensors its graph saved for backward (not read: saved-tensor hooks were on)"
    file, line = recs[0]["retain_at"]
    why = ("the step's last backward kept them with retain_graph=True, which the earlier "
           "ones on the same forward needed and it does not" if recs[0].get("chained") else
           "its backward(retain_graph=True) kept them and no later backward used them")
    fix = "retain_graph=True on the last backward" if recs[0].get("chained") else \
        "retain_graph=True"
    # Note [Other variables that hold a retained graph] (trace/doctor_retention.py)
    also = list(dict.fromkeys(v for r in recs for v in r.get("also", ())))
    who = f"`{var}` keeps" if not also else \
        f"`{var}` (and {', '.join(f'`{v}`' for v in also)}, which hold" \
        f"{'s' if len(also) == 1 else ''} it too) keep"
    bound = f"`{var}` is bound again" if not also else \
        f"{' and '.join(f'`{v}`' for v in [var, *also])} are bound again"
    return Finding(
        check="cross_step_retention", severity="warning", where=Where(file=file, line=line),
        message=(f"{who} {what} past the step's end (at the end of "
                 + _range_named(steps) + f", across {boundaries}): "
                 f"{why}, so they stay until {bound}, on top of the next "
                 f"forward's own; drop {fix}, or `del {', '.join([var, *also])}` after its "
                 "last backward"),
        evidence={"steps": steps, "kept_bytes_per_step": per if known else [],
                  **({"also": also} if also else {})})


def _at(recs: list) -> int:
    """A line of the function whose variable the records' holder is, 0 if unknown (Note
    [The function whose variable it is], doctor/source.py)."""
    return next((int(r["at"]) for r in recs if r.get("at")), 0)


def _ctx_finding(var: str, file: str, recs: list, boundaries: str, at: int = 0) -> Finding:
    """A spent graph kept past the step that still holds tensors a custom autograd Function
    keeps on `ctx` (Note [A spent graph that still holds tensors] in
    memledger/trace/doctor_retention.py)."""
    steps = sorted({int(r["step"]) for r in recs})
    held = [sum(int(r["ctx_bytes"]) for r in recs if int(r["step"]) == s) for s in steps]
    # Note [Graphs held through ctx] (trace/doctor_retention.py)
    saved = [sum(int(r.get("ctx_saved", 0)) for r in recs if int(r["step"]) == s)
             for s in steps]
    # Note [Other variables that hold the spent graph] (trace/doctor_retention.py)
    also = list(dict.fromkeys(v for r in recs for v in r.get("also", ())))
    holders = ", ".join(f"`{v}`" for v in also)
    # Note [The Function that keeps them] (trace/doctor_retention.py)
    fns = list(dict.fromkeys(f for r in recs for f in r.get("ctx_fns", ())))
    keeper = "a custom autograd Function keeps" if not fns else \
        f"the autograd Function{'s' if len(fns) > 1 else ''} " \
        f"{', '.join(f'`{f}`' for f in fns)} keep{'' if len(fns) > 1 else 's'}"
    who = f"`{var}` keeps its graph" if not also else \
        f"`{var}` (and {holders}, which hold{'s' if len(also) == 1 else ''} part of it) keep " \
        "its graph"
    return Finding(
        check="cross_step_retention", severity="warning",
        where=Where(file=file, line=accumulation_line(file, var, at)),
        message=(f"{who} past the step's end (at the end of " + _range_named(steps) + "), and "
                 "that graph still holds " + (
                     f"{format_bytes(held[-1])}: {format_bytes(held[-1] - saved[-1])}"
                     if saved[-1] else format_bytes(held[-1])) +
                 f" of tensors {keeper} on ctx as attributes (not save_for_backward, so "
                 "backward freed none of them)" + (
                     f" and {format_bytes(saved[-1])} that the graphs of those tensors "
                     "still save for backward (no backward of this graph freed them),"
                     if saved[-1] else "") + " until the next step replaces it; `del "
                 f"{', '.join([var, *also])}` after the step frees them"),
        evidence={"steps": steps, "ctx_bytes_per_step": held,
                  **({"ctx_saved_bytes_per_step": saved} if any(saved) else {}),
                  **({"also": also} if also else {})})


def _side_finding(var: str, file: str, recs: list, boundaries: str, at: int = 0) -> Finding:
    """A branch of an earlier forward's graph that no backward ran, kept past a later
    backward of the step (Note [A branch no backward ran, kept past a later backward] in
    memledger/trace/doctor_retention.py)."""
    steps = sorted({int(r["step"]) for r in recs})
    saved = [sum(int(r["side_saved"]) for r in recs if int(r["step"]) == s) for s in steps]
    # Note [A branch kept over several steps] (trace/doctor_retention.py): held longer, by
    # more tensors at the last step end than at the first, it grows (a list of branches)
    held = [sum(int(r.get("side_tensors", 1)) for r in recs if int(r["step"]) == s)
            for s in steps]
    unread = min(saved) < 0   # Note [A branch saved through hooks] (trace/doctor_retention.py)
    grows = held[-1] > held[0] and (unread or saved[-1] > saved[0])
    if unread:
        size = ("tensors saved for backward that nothing will read (not read: saved-tensor "
                "hooks were on)")
    else:
        size = f"{format_bytes(saved[-1])} saved for backward that nothing will read"
    if grows:
        size += (f" at the end of step {steps[-1]}, up from "
                 + ("" if unread else f"{format_bytes(saved[0])} in ")
                 + f"{count(held[0], 'tensor')} at the end of step {steps[0]} ({held[-1]} "
                 "tensors now: it takes another branch and lets go of none)")
    also = list(dict.fromkeys(v for r in recs for v in r.get("also", ())))
    fns = list(dict.fromkeys(f for r in recs for f in r.get("side_fns", ())))
    bw_file, bw_line = next((r["side_from"] for r in recs if r.get("side_from")), ("", 0))
    bw = f"the backward at {Path(bw_file).name}:{bw_line}" if bw_line else "an earlier backward"
    who = f"`{var}` keeps" if not also else \
        f"`{var}` (and {', '.join(f'`{v}`' for v in also)}, which hold" \
        f"{'s' if len(also) == 1 else ''} part of it) keep"
    ops = ", ".join(f"`{f}`" for f in fns[:4]) + (f" and {len(fns) - 4} more" if len(fns) > 4
                                                  else "")
    return Finding(
        check="cross_step_retention", severity="error" if grows else "warning",
        where=Where(file=file, line=accumulation_line(file, var, at)),
        message=(f"{who} {'branches' if grows else 'a branch'} of the graph that {bw} ran "
                 f"through: ops on {'their' if grows else 'its'} tensors that no backward "
                 f"ran ({ops}), which still hold {size}, kept through the step's later "
                 "forward and backward and past its end (at the end of "
                 + steps_named(steps) + "); compute "
                 + ("what it keeps under torch.no_grad() or from detached tensors" if grows
                    else "that branch under torch.no_grad() or from detached tensors, or "
                    f"`del {', '.join([var, *also])}` after that backward")),
        evidence={"steps": steps, "side_saved_bytes_per_step": [] if unread else saved,
                  "ops": fns,
                  **({"side_tensors_per_step": held} if grows else {}),
                  **({"also": also} if also else {})})


def _store_finding(var: str, file: str, recs: list) -> Finding:
    """A list or dict that the script's saved-tensor pack hook fills, still holding saves
    at step ends (Note [A store that saved-tensor hooks fill] in
    memledger/trace/doctor_retention.py): an error where it grows."""
    steps = sorted({int(r["step"]) for r in recs})
    per = {int(r["step"]): r for r in recs}
    tensors = [int(per[s]["store"]) for s in steps]
    nbytes = [int(per[s]["bytes"]) for s in steps]
    name, first = per[steps[0]]["pack"]
    grows = len(steps) > 1 and tensors[-1] > tensors[0]
    held = f"{count(tensors[-1], 'tensor')}, {format_bytes(nbytes[-1])}"
    if grows:
        over = steps[-1] - steps[0]
        more = (tensors[-1] - tensors[0], nbytes[-1] - nbytes[0])
        each = all(x % over == 0 for x in more)
        said = (f"each step adds {count(more[0] // over, 'tensor')}, "
                f"{format_bytes(more[1] // over)}" if each else
                f"{over} steps added {count(more[0], 'tensor')}, {format_bytes(more[1])}")
        what = (f"is never emptied: at the end of {steps_named(steps)} it holds {held} "
                f"(up from {tensors[0]} at the end of step {steps[0]}; {said}), every "
                "forward's saves kept after the backward that read them")
    else:
        what = (f"still holds {held} at the end of {steps_named(steps)}, after the backward "
                "that read them: one forward's saves, kept through the next forward")
    return Finding(
        check="cross_step_retention", severity="error" if grows else "warning",
        where=Where(file=file, line=int(first)),
        message=(f"`{var}`, which the saved-tensor hook `{name}()` here fills with the "
                 f"tensors autograd saves for backward, {what}; "
                 f"remove each entry in the unpack hook, or empty `{var}` after each "
                 "backward"),
        evidence={"steps": steps, "tensors_per_step": tensors, "bytes_per_step": nbytes})


def _steps(run) -> str:
    """What the boundaries are: optimizer steps, or steps as `--steps-by` counted them."""
    return "optimizer steps" if run.steps_by == "optimizer" else \
        f"steps (counted by {run.steps_by})"


def _range_named(steps: list[int]) -> str:
    """The steps from the first to the last that held it: 'step 2', 'steps 2 and 3',
    'steps 1-3'."""
    return steps_named(range(steps[0], steps[-1] + 1))


# Note [A kept tensor of several numbers]
# The advice "accumulate out.item() or out.detach() instead" offered `.item()`, which a
# tensor of more than one element refuses ("a Tensor with 128 elements cannot be converted
# to Scalar"). x-mlps-pytorch's `FiLMableMLP` trained by tests/clients/train_xmlps.py
# --model film --keep-outputs keeps each step's 8 x 16 fp32 output (`kept.append(out)`,
# 512 B a step): it was told to accumulate `out.item()`. `.item()` is offered where every
# tensor kept has one element (a loss, a metric: shape `[]` or `[1]`), `.detach()` alone
# otherwise, from the shapes the retained records carry.
def _one_number_each(recs: list[dict]) -> bool:
    return all(math.prod(r.get("shape") or []) == 1 for r in recs)
