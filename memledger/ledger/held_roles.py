"""Categories of storages something keeps across a step: the script (a clone, a state the
next step reads, a past gradient), or an optimizer that hands its copy to a parameter.
Read by `_categories` (ledger/model.py); no torch.

# Note [Kept by the script across a step]
A storage made in the run with no role was a `temporary`, however long it lived. A script
may keep one across whole steps: loralib's README saves `lora.lora_state_dict(model)`, and
tests/clients/train_loralib.py `--save` keeps a clone of it from each step to the next
(`saved = {k: v.clone() ...}` after `optimizer.step()`): the 18 LoRA factors' and biases'
clones, 10,112 B, read `temporary` at the peak (inside step 2's backward, beside that
step's own 26,632 B of intermediates) and `temporary` resident at the end, where the step
had freed every intermediate. A clone the script keeps over a step is none of that step's
intermediates (design.md: "intermediates not saved, backward scratch"); it is state the
script holds outside the step, what `other` says of a model the script keeps and never
calls (Note [Modules never called], trace/collector.py). So a storage made in the run that
no role claims, made before a step's first forward began and still live after that step
ended (its step record; or held at the close), reads `other`: it was held over that step's
forward, backward and update. A storage the step itself made (from its first forward on:
its forwards, loss, backward passes, update) keeps `temporary` even where the script holds
it into the next step (a loss or an output until the next one replaces it, the update's
scratch freed as `step()` returns after its step record). The first forward of a step, not
any: an extragradient or a micro-batched step runs several. What the script makes
before the forward and hands to the model or the loss is `input` (a role, above this); an
index it made the batch from and holds until the next iteration reads `other` too (it is
the script's, not the step's). Only the category moves: bytes, peaks and the replay are
as before. Pinned: tests/clients/test_held_roles.py (`train_held_roles.py --keep`).

# Note [Read by the next step]
State the script carries from step to step need not be one storage over a whole step: the
grokfast paper's `gradfilter_ema` keeps `grads[n]`, an EMA of each gradient, in a dict, and
each step makes the new EMA from the old after its backward (`grads[n] = grads[n] * alpha
+ g * (1 - alpha)`), freeing the old there. No EMA storage lives over a whole step, so the
rule above left them `temporary`: tests/clients/train_grokfast.py `--opt adamw --filter
ema` (2 steps, 579,260 B) read 124,680 B of `temporary` at the peak (step 2's backward;
step 1's EMAs, 83,708 B, among them) and 83,712 B resident at the end (the EMAs and the
4 B loss), where GrokFastAdamW's own EMA reads `optimizer_state`. What tells them from a
loss or an output the script holds into the next step (until the next one replaces it)
is that the next step reads them: a storage made before a step's first forward that an
op reads from that first forward on (its `last_use`) is the script's state too, `other`.
A loss's last use is its step's backward or `.item()`; the next forward only replaces it.
The read counts from that step's first backward, not its first forward: a loss the
script prints after an evaluation's forward between two steps (tests/clients/
train_optimizers.py) is read after a forward the rule above counts as the next step's.
After: 40,972 B `temporary` and 83,708 B `other` at that peak, 4 B and 83,708 B
resident. Only the category moves. Pinned: tests/clients/test_held_roles.py
(`train_held_roles.py --ema`).
At the close no step follows the last one, so its storages are read by none: one held at
the close, made after the last step's first forward, reads `other` where it was made from
a storage of the step before that the last step read (the state it carries): made by the
op that last read such a storage, or by the op that last read a storage so made, and on
(`new = old * a + g * b`: `old`'s last read makes `old * a`, whose last read, the `add`,
makes `new`). The ledger records each storage's last use and the op that made it, so the
chain is events, not a guess. fix53f's rule read likeness instead (the step before made a
storage by the same op, in the same module, of the same bytes): a script that keeps a
running average of a penalised loss (`avg = avg * 0.9 + loss.detach() * 0.1`, `loss =
mse + 1e-4 * l2`: both an `add` of 4 B in the script) had its last loss read `other`
(tests/clients/train_held_roles.py `--loss-avg`: resident `temporary` 0, `other` 8 B;
now 4 and 4). What the chain misses reads `temporary`, as before fix53f. State the last
step makes in place from a fresh storage (`new = g * b; new.add_(old, alpha=a)`: `old`'s
last read is the `add_`, which makes nothing) the chain now follows too: Note [Written in
place from the step before]. Pinned: tests/clients/test_held_roles.py (`--ema`,
`--loss-avg`, `--ema-in-place`).

# Note [Written in place from the step before]
The chain above steps from a storage to what the op at its last read made. An update
written into a fresh storage makes nothing there: tests/clients/train_held_roles.py
`--ema-in-place` (`new = p.grad * 0.1; new.add_(ema[n], alpha=0.9); ema[n] = new;
p.grad.add_(new)`, 2 steps) read the last step's EMAs `temporary` at the close, 2,276 B
resident (the EMAs' 2,244 beside the step's 32), `other` 0, where `--ema` (out of place)
reads 32 and 2,244. No op's inputs are in the ledger, and the last use of `new` (here the
later `p.grad.add_`) need not be the `add_`. So the trace notes, for an op outside
forward and backward that writes one tensor in place (`Tensor(a!)`, not the foreach
lists), the storage it wrote against every other storage it read (`_note_into`), and a
read's free (or `live`) record carries `into` (that storage's sid) where that op was its
last read. The chain steps through `into` as through a storage made at a last read:
`old`'s last read wrote `new`. After: 32 and 2,244; the fake ledger reads the same. Cost:
a dict entry per read of an in-place op outside forward and backward (the script's and
an optimizer's updates: one per tensor, a few per parameter a step), one lookup per free.
A ledger without `into` reads as before.

# Note [A step's product handed back by the next step]
A storage made before a step's first forward and live past its end is held over that
step (Note [Kept by the script across a step]), and a loss the step before made is made
before it. A loop replaces its loss inside the next step (`loss = F.cross_entropy(...)`),
but one that steps with a closure gets it back from `step()` (`loss = opt.step(closure)`),
as the step returns, after its step record: the loss was held over the whole next step,
and read `other` (hunt54c's grokadamw `--closure`, 4 B at the peak and resident, 2 steps;
tests/clients/train_closure.py `--batch-inside` 4 B at 2 steps, 8 B at the peak at 3).
It is the step's product held until the next one replaces it, a `temporary`. So a
storage the step before made (from its first forward to its end) is held over this one
only where it outlives this step's return: live at an event after the step's last (a free
at the next event came as `step()` returned, before any op after it), or held at the
close where a step follows this one. A history of losses the script keeps (`losses.append(
loss.detach())`) still reads `other` from the second step after; held at the close one
step after it was made, it reads `other` where the last step end's `holders` record names
it as an item of a container (Note [A history the script keeps]). A storage made between
steps (a clone, an index) is as before.
After: the closure's losses `temporary` (grokadamw `--closure` at the peak `other` 4 ->
0, `temporary` 122,888 -> 122,892 B; resident 4 -> 0 and 4 -> 8). Pinned:
tests/integration/test_other_loops.py (`train_closure.py --batch-inside`, 2 and 3 steps).

# Note [A gradient the script keeps past its step]
The grokfast paper's `gradfilter_ma` appends each step's `p.grad.data.detach()` to a deque
of the last `window` gradients: the script keeps the storage after `zero_grad()` drops
`.grad` and the next backward makes a new one (or its own `p.grad.data = ...` rebinds the
gradient to a new storage). A gradient's role stayed for the storage's whole life, so
tests/clients/train_grokfast.py `--opt adamw --filter ma` (window 2, 2 steps) read 251,124
B of `gradient` resident at the end, 3 x a model of 83,708 B, of which one is `.grad`.
design.md's categories say what a byte is, and a storage no parameter's `.grad` holds is
the script's state, `other`, as a clone it keeps is (Note [Kept by the script across a
step]). The ledger sees no unbinding (no record says `.grad` moved), but it sees the
parameter's next gradient storage made (its gradient role under the same name): from
that creation on (the next made in a later phase: a sparse gradient's indices and values,
one gradient under one name, come from one backward), a gradient storage still held after
the end of the step that made its successor (or at the close) reads `other`, named
`<parameter> (a past gradient)`, through the columns of Note [A copy the optimizer
keeps, then the parameter] the other way round
(`cat_before` `gradient`, the static category `other`; the replay's one rule that reads
gradients, which backward pass made them in replay/prepared.py, reads `cat_before` too).
Held past the end of that step, not just past the successor's creation: the paper's
`gradfilter_ema` rebinds `p.grad.data = p.grad.data + ...`, and the old storage, freed
at the rebinding, stays a gradient.
After: `gradient` 83,708 B resident, `other` 167,416 B. Only the category moves. Pinned:
tests/clients/test_held_roles.py (`train_held_roles.py --ma 2`).
From the fifty-fourth session the trace also writes when no `.grad` holds a gradient
storage that is still alive (`ungrad` records: Note [A gradient dropped from .grad],
trace/dropped_grads.py): `zero_grad(set_to_none=True)`'s end, a step's forward's start
after `model.zero_grad()`, a `.grad` rebound. From that event the storage reads `other`
too (the earlier of the two; the last record of a storage says, `ev` -1 where it was a
`.grad` again, so it keeps its role); a ledger without such records (older) reads as
above. Between the zero_grad and the next backward the kept storages read `gradient`
before: `train_held_roles.py --ma 3` at the peak (step 2's backward) `gradient` 2,244 B
(1,088 of them blocks.0's kept gradient), `other` 1,156 B; now 1,156 and 2,244, and no
`gradient` from the zero_grad to the backward (2,244 B before). Pinned: tests/clients/
test_held_roles.py (`--ma 3`, `--ma 3 --model-zero`), tests/unit/test_dropped_gradients.py.

# Note [A copy the optimizer keeps, then the parameter]
An extragradient optimizer (Cooper's `ExtraAdam` / `ExtraSGD`, after Gidel et al.) keeps a
copy of every parameter from its extrapolation to its step (`self.params_copy.append(
p.data.clone())`, then `p.data.add_(u)`), and its step makes the copy the parameter
(`p.data = self.params_copy[i].add_(u)`), freeing the weights the extrapolation moved.
The storage is optimizer state (the walk of Note [State outside optimizer.state] names it
`params_copy[i]`) and then a parameter (the step's post hook reads `p.data`), and a
storage's category is its highest role over its whole life: `parameter`. At the peak,
inside step 2's update of tests/clients/train_cooper.py `--optimizer extra`, `show` read
19.4 KiB of `parameter` (each copy under the name and module of the parameter it copies)
against a model of 10.3 KiB. A storage that the optimizer held as state before it held a
parameter's role becomes that parameter when the parameter's storage before it (the same
name, made before it, freed while it lives) is freed: that free is `p.data = copy`. Until
that event it reads as the optimizer state it was, under the optimizer's name for it and
the module that made it (`cat_until`, `cat_before`, `name_before`, `module_before`: the
queries at an event, `Ledger.live_at` and `curve_by_category`, read them, and the
replay's lifetimes cut its interval in two at the same place, so predict's breakdown says
the same; curves and peaks are the same sums); from it on, the parameter. A copy whose
parameter's old storage is never freed (something else holds it) stays a parameter for
its whole life, as before. The static `category` stays `parameter` (the replay's rules
read it; none of them moves a parameter). After: 10,516 B of parameters at that peak,
30,372 B of optimizer state (Adam's 21,016 and the copies not yet stepped). Pinned in
plain torch: tests/clients/test_held_roles.py (`train_held_roles.py --extragradient`).
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memledger.ledger.step_marks import StepMarks


def kept_across_a_step(created: np.ndarray, freed: np.ndarray, last_use: np.ndarray,
                       marks: StepMarks, into: np.ndarray | None = None,
                       kept_items: np.ndarray | None = None) -> np.ndarray:
    """Per storage: made before a step's first forward began and still live after that
    step's end (`freed` < 0: still held at the close; one the step before made, past the
    step's return: Note [A step's product handed back by the next step]), or read by an op
    from that step's first backward on (Note [Kept by the script across a step]); and, held
    at the close and made in the last step, one made from a storage of the step before that
    the last step read (Note [Read by the next step]; `into`: per storage, the storage its
    last read wrote in place, -1 if none; `kept_items`: per storage, held at the last step's
    end as an item of a container, Note [A history the script keeps]). `marks`: the
    ledger's step bounds (step_marks)."""
    first, ends, bwd = marks.first, marks.ends, marks.bwd
    out = np.zeros(len(created), dtype=bool)
    if not len(first) or not len(ends):
        return out
    i = np.searchsorted(first, created, side="right")    # the first step begun after it
    nxt = i < len(first)
    start = first[np.minimum(i, len(first) - 1)]
    j = np.searchsorted(ends, start, side="left")        # that step's end
    has = nxt & (j < len(ends))
    end = ends[np.minimum(j, len(ends) - 1)]
    # Note [A step's product handed back by the next step]: one the step before made (from
    # its first forward to its end) is held over this step only where it outlives the
    # step's return (live at an event after its end; held at the close, where a step
    # follows this one)
    own = i >= 1
    mine = ends[np.minimum(np.searchsorted(ends, first[np.maximum(i - 1, 0)], side="left"),
                           len(ends) - 1)]
    product = own & (created <= mine)
    # Note [A history the script keeps]: held at the close one step after it was made, as
    # an item of a container
    later = (j < len(ends) - 1) if kept_items is None else (j < len(ends) - 1) | kept_items
    out = has & np.where(product, (freed > end + 1) | ((freed < 0) & later),
                         (freed < 0) | (freed > end))
    # read once that step's first backward began (Note [Read by the next step]): a loss
    # printed after an evaluation's forward between steps is read before it
    b = np.searchsorted(bwd, start, side="left")
    back = bwd[np.minimum(b, len(bwd) - 1)] if len(bwd) else start
    read = has & (b < len(bwd)) & (back <= end) & (last_use >= back)
    out |= read
    if len(first) > 1:
        # the last step's, held at the close: made from the state the step before kept
        prev = read & (i == len(first) - 1)
        last = (i == len(first)) & (created > first[-1]) & (freed < 0) & ~out
        if prev.any() and last.any():
            out |= last & _made_from(np.flatnonzero(prev), created, last_use,
                                     np.flatnonzero((i == len(first)) &
                                                    (created > first[-1])), into)
    return out


# Note [A history the script keeps]
# Note [A step's product handed back by the next step] reads a storage the step before
# made and the script holds at the close `temporary`: the trace ends inside the last step,
# and a closure's loss (`loss = opt.step(closure)`) is rebound as that step returns. A
# history of losses is held so too one step after it was made, and read `temporary`
# where the same list's older items read `other`: tests/clients/train_held_roles.py
# `--history list` (`losses.append(loss.detach())` after each backward, read after the
# loop; 3 steps) resident `temporary` 8 B (step 2's and step 3's losses), `other` 4 B
# (step 1's); at 2 steps `temporary` 8, `other` 0. What tells the two apart is who holds
# it: a closure's loss is held by the variable the return rebinds, a history's by an item
# of a list, a deque or a dict, which the script keeps until it drops the item. So the
# collector writes, beside a step end's `holders` (Note [Who holds a saved storage at a
# step's end], trace/step_holders.py), `products`: the names that hold a storage the step
# before made (its sids, from the end before it to its own), and such a storage held at
# the close reads `other` where the last step end's `products` name it as an item
# (`losses[1]`, `self.hist[0]`) or a deque's. After: 3 steps `temporary` 4 (the last
# step's loss), `other` 8; 2 steps 4 and 4. The last step's own loss, in the list too,
# stays `temporary`, as it is on every length of history: an item made in the last step
# may be the step's output (`out = model(x)`, a tuple or a dict the next forward
# replaces), and nothing after the close says which. A loss held one step by a variable
# (`prev = loss.detach()`) is as before: `other` where the last step read it after its
# backward began (Note [Read by the next step]), `temporary` where not.
def held_as_items(index: pd.Index, holders: list, close: int) -> np.ndarray:
    """Per storage of `index`: named at the step end `close` by its `holders` record's
    `products` as an item of a container (Note [A history the script keeps])."""
    out = np.zeros(len(index), dtype=bool)
    sids = [int(s) for r in holders if int(r["ev"]) == close
            for name, held in (r.get("products") or {}).items()
            if "[" in name.partition(":")[2] for s in held]
    if sids:
        rows = index.get_indexer(sids)
        out[rows[rows >= 0]] = True
    return out


def _made_from(state: np.ndarray, created: np.ndarray, last_use: np.ndarray,
               made: np.ndarray, into: np.ndarray | None = None) -> np.ndarray:
    """Per storage: one of `made` that the rows `state` made, through ops each of which
    was the last to read what it was made from: a storage made by the op at a row's last
    use, or written in place there (`into`), and so on (Note [Read by the next step]: `new
    = old * a + g * b` makes `new` at the last read of `old * a`, made at the last read of
    `old`; `new = g * b; new.add_(old)` writes `new` at the last read of `old`)."""
    order = made[np.argsort(created[made], kind="stable")]
    at = created[order]
    reached = np.zeros(len(created), dtype=bool)
    mine = np.zeros(len(created), dtype=bool)
    mine[made] = True
    frontier = state
    while len(frontier):
        uses = np.unique(last_use[frontier])
        lo = np.searchsorted(at, uses, side="left")
        hi = np.searchsorted(at, uses, side="right")
        nxt = np.concatenate([order[a:z] for a, z in zip(lo.tolist(), hi.tolist()) if z > a]
                             or [np.zeros(0, dtype=np.int64)])
        if into is not None:   # Note [Written in place from the step before]
            w = into[frontier]
            w = w[w >= 0]
            nxt = np.concatenate([nxt, w[mine[w]]])
        frontier = np.unique(nxt[~reached[nxt]])
        reached[frontier] = True
    return reached


def optimizer_copies(df: pd.DataFrame, roles: pd.DataFrame, cats: np.ndarray) -> pd.DataFrame:
    """Storages that were an optimizer's state before they became a parameter: one row per
    such sid (index) with `until` (the event from which it is the parameter) and `name`
    (the optimizer's name for it). Note [A copy the optimizer keeps, then the parameter].
    Plain Python over the role records (a few per named storage): no frame operations on
    the ledgers that have none, which are most."""
    out: dict[int, tuple[int, str]] = {}
    if len(roles):
        sids = roles["sid"].to_numpy(dtype=np.int64)
        kinds = roles["role"].to_numpy()
        names = roles["name"].to_numpy()
        opt_first: dict[int, int] = {}
        opt_name: dict[int, str] = {}
        par_first: dict[int, int] = {}
        par_name: dict[int, str] = {}
        for i, (sid, kind, name) in enumerate(zip(sids.tolist(), kinds, names)):
            if kind == "optimizer_state":
                opt_first.setdefault(sid, i)
                opt_name[sid] = name if isinstance(name, str) else ""
            elif kind == "parameter":
                par_first.setdefault(sid, i)
                par_name[sid] = name if isinstance(name, str) else ""   # the last names it
        copies = [s for s, i in opt_first.items() if par_first.get(s, -1) > i]
        if copies:
            row = dict(zip(df.index.tolist(), range(len(df))))
            created = df["created"].to_numpy(dtype=np.int64)
            freed = df["freed"].to_numpy(dtype=np.int64)
            by_name: dict[str, list[int]] = {}
            for s, name in par_name.items():
                if name and s in row:
                    by_name.setdefault(name, []).append(row[s])
            for s in copies:
                r = row.get(s)
                if r is None or cats[r] != "parameter" or not par_name[s]:
                    continue
                until = [int(freed[p]) for p in by_name[par_name[s]] if p != r and
                         created[p] < created[r] and 0 <= freed[p] and created[r] < freed[p]
                         and (freed[r] < 0 or freed[p] <= freed[r])]
                if until:
                    out[s] = (max(until), opt_name[s])
    return pd.DataFrame({"until": np.array([u for u, _ in out.values()], dtype=np.int64),
                         "name": np.array([n for _, n in out.values()], dtype=object)},
                        index=pd.Index(list(out), dtype=np.int64, name="sid"))


def past_gradients(df: pd.DataFrame, roles: pd.DataFrame, cats: np.ndarray,
                   phases: list, steps: list, ungrad: list = ()) -> pd.DataFrame:
    """Gradient storages the script keeps after their parameter's next gradient was made,
    or after no `.grad` held them (`ungrad` records): one row per such sid (index) with
    `until` (the earlier of that next gradient's creation and the drop, from which the
    storage is `other`) and `name` (the parameter's gradient name, "" if none). Notes [A
    gradient the script keeps past its step] and [A gradient dropped from .grad]."""
    out: dict[int, tuple[int, str]] = {}
    g = roles[roles["role"] == "gradient"] if len(roles) else roles
    named: dict[int, str] = {}
    if len(g):
        for sid, name in zip(g["sid"].tolist(), g["name"].tolist()):
            if isinstance(name, str) and name:
                named[sid] = name                       # the last names it
        sids = list(named)
        row = dict(zip(sids, df.index.get_indexer(sids).tolist()))
        created = df["created"].to_numpy(dtype=np.int64)
        freed = df["freed"].to_numpy(dtype=np.int64)
        ends = np.array(sorted(int(r["ev"]) for r in steps), dtype=np.int64)
        marks = np.array(sorted({int(r["ev"]) for r in phases}), dtype=np.int64)
        by_name: dict[str, list[int]] = {}
        for sid, name in named.items():
            r = row[sid]
            if r >= 0 and cats[r] == "gradient":
                by_name.setdefault(name, []).append(r)
        for rows in by_name.values():
            if len(rows) < 2:
                continue
            rows.sort(key=lambda r: created[r])
            for n, r in enumerate(rows):
                # the next made in a later phase: a sparse gradient's indices and values,
                # one gradient under one name, are made in the same backward
                after = int(marks[min(np.searchsorted(marks, created[r], side="right"),
                                      len(marks) - 1)]) if len(marks) else -1
                nxt = next((q for q in rows[n + 1:] if created[q] >= after > created[r]),
                           None)
                if nxt is None:
                    continue
                at = int(created[nxt])
                j = int(np.searchsorted(ends, at, side="left"))
                # still held after the step that made the next one ended (or at the close)
                if freed[r] < 0 or (j < len(ends) and freed[r] > ends[j]):
                    out[int(df.index[r])] = (at, named[int(df.index[r])])
    if len(ungrad):
        _dropped(df, cats, ungrad, named, out)
    return pd.DataFrame({"until": np.array([u for u, _ in out.values()], dtype=np.int64),
                         "name": np.array([n for _, n in out.values()], dtype=object)},
                        index=pd.Index(list(out), dtype=np.int64, name="sid"))


def _dropped(df: pd.DataFrame, cats: np.ndarray, ungrad: list, named: dict[int, str],
             out: dict[int, tuple[int, str]]) -> None:
    """Into `out`: each gradient storage an `ungrad` record says no `.grad` held from its
    `ev` on, while it lived (the last record of a storage says; -1: it was a `.grad` again),
    from the earlier of that event and the one `out` has. Note [A gradient dropped from
    .grad] (trace/dropped_grads.py)."""
    last: dict[int, int] = {}
    for rec in ungrad:
        last[int(rec["sid"])] = int(rec["ev"])
    sids = [s for s, ev in last.items() if ev >= 0]
    if not sids:
        return
    rows = df.index.get_indexer(sids)
    created = df["created"].to_numpy(dtype=np.int64)
    freed = df["freed"].to_numpy(dtype=np.int64)
    for sid, r in zip(sids, rows.tolist()):
        ev = last[sid]
        if r < 0 or cats[r] != "gradient" or ev <= created[r] or 0 <= freed[r] <= ev:
            continue
        was = out.get(sid)
        out[sid] = (min(ev, was[0]) if was else ev, named.get(sid, ""))


def dropped_spans(ungrad: list) -> list[tuple[int, int, int]]:
    """(sid, from, to): the events over which no `.grad` held a gradient storage before a
    take-back said when it was a `.grad` again (`ev` -1 with `at`; older take-backs have no
    `at` and give none). The last drop, with no take-back after it, is `past_gradients`'
    cut. Note [A gradient dropped from .grad, then put back] (trace/dropped_grads.py)."""
    out = []
    open_at: dict[int, int] = {}
    for rec in ungrad:
        sid, ev = int(rec["sid"]), int(rec["ev"])
        if ev >= 0:
            open_at.setdefault(sid, ev)
            continue
        start = open_at.pop(sid, None)
        at = rec.get("at")
        if start is not None and at is not None and int(at) > start:
            out.append((sid, start, int(at)))
    return out
