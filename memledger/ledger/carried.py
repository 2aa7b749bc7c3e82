"""Activations the script carries into the next step: from their step's end, `other`.
Read by `_earlier_roles` (ledger/model.py); no torch.

# Note [A state carried into the next step]
A loop that hands a step's hidden state to the next step, detached (HRM's deep-supervision
segments, truncated backpropagation through time), keeps a storage that step k's graph
saved and step k's backward read: the script holds it past step k's end, and step k+1's
forward reads it. Its role was `activation` (saved for backward) for its whole life, so
tests/clients/train_hrm.py (3 steps) read 2,048 of the 76,160 B of `activation` at the
peak (segment 2's forward) as segment 1's two last hidden states, whose backward had run,
and 2,048 B of `activation` resident at the end; tests/clients/train_carried_state.py `--add`
(a recurrent cell, 3 steps) 512 of 1,056 B at the peak (step 2's backward) and 1,024 of
1,056 B resident. design.md's `activation` is what is saved for a backward; once that
backward has read it, what the script keeps is its own state, carried across steps,
which `other` says of a clone it keeps (Note [Kept by the script across a step] in
ledger/held_roles.py: that rule reads storages no role claims, and these have one).

The rule: a storage whose saves were all made in step k (from step k-1's end to step k's
end), each read by a backward before step k's end (unpacks at least saves), held past
step k's end, and read by an op from step k+1's first forward on (its `last_use`), reads
`activation` until step k's end (its step record) and `other` from there. The last step
has no next one: Note [The last step's state, by its holder] says which of its storages
held at the close are the state it would carry; the others (the output the script holds
until the next forward replaces it, saved by the loss and never read by the next step)
stay `activation`, on the last step as on the others. A state no op saved is carried
so too, `temporary` before its step's end: Note [A state no op saved].

Note [A state the next step saves again]
A carried state the next step saves again (`h_prev @ W_h`: the matmul saves its input;
tests/clients/train_carried_state.py without `--add`) stays `activation` its whole life.
design.md's `activation` is what is saved for a backward, and from that save to step
k+1's backward it is saved for one; what it is not is an activation from step k's end to
that save, where the script alone holds it. One `cat_until` per storage can cut its life
once, and the save splits the carried stretch from the saved one: the plain script's step
1 state (3 steps) is held by the script alone from step 1's end (event 73) to step 2's
`h_prev @ W_h` (event 80), 7 events, then saved for step 2's backward until its read
(event 126), 46 events, then held by `carried` to its free (event 150) as the output the
script holds is, saved for a backward that ran and read by no next step. The run's peak
(step 2's backward) falls in the saved stretch, as a peak in a backward does, so
`activation` is what it is where it counts; `other` from step 1's end would call the
bytes step 2's backward reads the script's state. A second cut would need a third
interval in every query and in the replay's split, for labels only.

Note [The last step's state, by its holder]
fix54e read the last step's state by likeness: a storage of the last step held at the
close read `other` where an earlier step carried one made by the same op, in the same
module, of the same bytes. A loop repeats, but likeness is not holding: in
tests/clients/train_carried_state.py `--add --states` (the model also hands back every
unrolled state, which the script holds as `states`) the first unrolled state of the last
step, a `tanh` in `cell` of 512 B as the carried one is, read `other` at the close though
no step would read it (3 steps: resident `activation` 32 B, `other` 1,536 B); and `--grow`
(the state keeps its past rows, 1,024, 2,048, 3,072 B in steps 1 to 3) left the last
step's state, whose bytes no earlier step's had, `activation` (resident 3,104 B and
`other` 2,048 B). What tells the state from the step's other saves held at the close is
who holds it: the loop binds its state to the same name every step and its output to
another. The trace writes, as each step ends, the names of the script's frames that hold
a saved storage (`holders` records, Note [Who holds a saved storage at a step's end] in
trace/step_holders.py). So a storage of the last step held past its end reads `other`
from there where a name that holds it at the last step's end held, at an earlier step's
end, the state that step carried (a storage the rule above found read by the next step,
`other` from that very end). An earlier step, not the step before: HRM's deep supervision
hands a batch's first segment's states to its second and the second's to nothing (the
next batch starts from none), so in 3 steps the step before the last carried nothing,
and the last (the next batch's first segment) holds in `hiddens` what its second segment
would read. In 2 steps the last is batch 1's second segment, whose states `hiddens`
holds at the close: the name holds the state, and held by the script after the backward
that read them they are saved for none, `other` as fix54e read them. After: `--states`
resident `activation` 544 B, `other` 1,024 (the first unrolled state is the step's, as
the output is); `--grow` resident `activation` 32, `other` 5,120. A ledger without
`holders` records (older, or a last step closed where no frame was left: the script's
own end) keeps its last step's saves `activation`: nothing says which one is carried. A
loop a library runs is read from its frames (Note [A loop a library runs], trace/
step_holders.py).

How: the columns of Note [A copy the optimizer keeps, then the parameter] (ledger/
held_roles.py), as Note [A gradient the script keeps past its step] uses them: the static
category `other` (what it is at the close: `resident`), `cat_before` `activation` until
`cat_until`. The queries at an event read them (`Ledger.live_at`, `curve_by_category`),
and the replay, whose rules read `activation` (what is saved, dropped, offloaded, what a
re-run makes again), reads `cat_before` for these (replay/prepared.py `_rule_categories`):
its rules and predictions are the old ones; only its lifetimes' labels cut at the same
place, so predict's breakdown reads as `show` does. Only the category moves: bytes,
curves and peaks are the same sums. Pinned: tests/clients/test_carried_state.py,
tests/unit/test_last_step_holders.py.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from memledger.ledger.step_marks import StepMarks


def carried_until(df: pd.DataFrame, is_act: np.ndarray, marks: StepMarks,
                  holders: list = (), is_temp: np.ndarray | None = None,
                  read_in_fwd: np.ndarray | None = None) -> np.ndarray:
    """Per storage of `df` (the ledger's storages frame, with its saves and unpacks), the
    event from which the activation reads `other` (its step's end), -1 where it stays an
    activation (Note [A state carried into the next step]); `holders`: the ledger's
    `holders` records (Note [The last step's state, by its holder]). `is_temp`: per
    storage, a product no role claims, a candidate by Note [A state no op saved], whose
    `read_in_fwd` says its last use fell in a forward phase."""
    n = len(df)
    out = np.full(n, -1, dtype=np.int64)
    fwd, ends = marks.fwd, marks.ends
    if is_temp is None or not len(fwd) or not len(ends):
        is_temp = np.zeros(n, dtype=bool)
    if not len(fwd) or not len(ends) or not (is_act.any() or is_temp.any()):
        return out
    col = {c: df[c].to_numpy(dtype=np.int64) for c in (
        "freed", "last_use", "saved_ev", "saved_last_ev", "unpack_ev", "saves", "unpacks")}
    j = np.searchsorted(ends, col["saved_ev"], side="left")   # the step of its first save
    ok = is_act & (col["saved_ev"] >= 0) & (j < len(ends))
    end = ends[np.minimum(j, len(ends) - 1)]
    ok &= (col["saved_last_ev"] <= end) & (col["unpack_ev"] >= 0) & (col["unpack_ev"] <= end)
    ok &= (col["unpacks"] >= col["saves"]) & ((col["freed"] < 0) | (col["freed"] > end))
    # read from the next step's first forward on (the first forward after this step's end)
    f = np.searchsorted(fwd, end, side="right")
    nxt = fwd[np.minimum(f, len(fwd) - 1)]
    read = ok & (j < len(ends) - 1) & (f < len(fwd)) & (col["last_use"] >= nxt)
    # Note [A state no op saved]: a product of the step's forward, held past its end and
    # read by the next step's forward (or from its first backward on)
    tmp, last_tmp, tend = _unsaved_state(df, is_temp, marks, col, read_in_fwd)
    out[read] = end[read]
    out[tmp] = tend[tmp]
    # the last step's, held past its end by a name that held an earlier step's carried state
    last = ok & (j == len(ends) - 1) | last_tmp
    if (read.any() or tmp.any()) and last.any() and len(holders):
        hit = _held_as_state(df.index, out, int(ends[-1]), holders) & last
        out[hit] = np.where(ok[hit], end[hit], tend[hit])
    return out


# Note [A state no op saved]
# The rule above reads a state the step's graph saved; a state no op saves, made by an
# `add` and read by the next step's `add` (accelerated-scan's reference scan; assoc-scan's
# `AssocScan` hands on an interleave's `stack`), has no role, and Note [Kept by the
# script across a step] read it by its lifetime: the step's product, `temporary`, unless
# the script held it over the whole next step, where it read `other` from the event it was
# made (Note [A step's product handed back by the next step]). tests/clients/
# train_carried_state.py `--add --residual` (3 steps, each cell `h = h_prev +
# tanh(x @ W_in)`, the head on `tanh(h)`): resident `temporary` 1,056 B (steps 2's and
# 3's states, 512 B each, beside the loss's 32 B), `other` 0, where `--add` (`tanh`
# saves the state) reads `other` 1,024 and `temporary` 32; at the peak step 1's state
# read `other` from its `add` in step 1's forward on. hunt56c's tiers: the reference scan
# `temporary`, the log-space minGRU (whose `exp` saves it) `other`. One thing to a user:
# state the script carries between steps. So a storage no role claims (here `temporary`,
# or `other` by that lifetime rule, unnamed), made in step k's forward (from its first
# forward to its first backward), held past step k's end and read from step k+1's first
# forward on by an op in a forward phase (or from that step's first backward on: Note
# [Read by the next step]), reads `temporary` until step k's end and `other` from there,
# as the saved one reads `activation` then `other`. In a forward phase: a loss the script
# prints after an evaluation's forward between two steps is read in the loss phase, the
# step's product as before. The last step's state held at the close is read by its holder
# (Note [The last step's state, by its holder]) from the `holders` record's `made` (the
# names that hold a live, unsaved storage the step made: Note [Who holds a saved storage
# at a step's end], trace/step_holders.py). The replay's rules read `cat_before` for it
# (replay/prepared.py `_rule_categories`), as they read the saved state's `activation`:
# every prediction is the number it was; its breakdown labels as `show` does. After:
# `--residual` resident `temporary` 32, `other` 1,024, as `--add`. Pinned: tests/clients/
# test_carried_state.py, tests/unit/test_last_step_holders.py.
def _unsaved_state(df: pd.DataFrame, is_temp: np.ndarray, marks: StepMarks, col: dict,
                   read_in_fwd: np.ndarray | None
                   ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(carried from its step's end, held at the close by the last step, the end of the
    step it was made in): per storage, the unsaved candidates of Note [A state no op
    saved]."""
    n = len(df)
    none = np.zeros(n, dtype=bool)
    fwd, bwd, ends, first = marks.fwd, marks.bwd, marks.ends, marks.first
    if not is_temp.any() or not len(first):
        return none, none, np.full(n, -1, dtype=np.int64)
    created = df["created"].to_numpy(dtype=np.int64)
    freed, last_use = col["freed"], col["last_use"]
    j = np.searchsorted(ends, created, side="left")         # the step it was made in
    has = is_temp & (j < len(ends))
    jj = np.minimum(j, len(ends) - 1)
    end = ends[jj]
    k = np.searchsorted(first, end, side="right") - 1       # that step's first forward
    start = first[np.maximum(k, 0)]
    b = np.searchsorted(bwd, start, side="left")
    back = bwd[np.minimum(b, len(bwd) - 1)] if len(bwd) else end
    back = np.where((b < len(bwd)) & (back <= end), back, end)
    made = has & (k >= 0) & (created >= start) & (created < back) & \
        ((freed < 0) | (freed > end))
    f = np.searchsorted(fwd, end, side="right")             # the next step's first forward
    nxt = fwd[np.minimum(f, len(fwd) - 1)]
    nb = np.searchsorted(bwd, end, side="right")            # and its first backward
    nback = bwd[np.minimum(nb, len(bwd) - 1)] if len(bwd) else nxt
    in_fwd = np.ones(n, dtype=bool) if read_in_fwd is None else read_in_fwd
    held = made & (j < len(ends) - 1) & (f < len(fwd)) & (last_use >= nxt)
    read = held & (in_fwd | ((nb < len(bwd)) & (last_use >= nback)))
    if (other := held & ~read).any():   # Note [A state the script updates outside the
        read |= _begets_state(other, made, created, last_use, freed, ends, j)   # forward]
    return read, made & (j == len(ends) - 1) & (freed < 0), end


# Note [A state the script updates outside the forward]
# Note [A state no op saved] takes a state the next step reads in a forward phase: a loss
# the script prints after an evaluation's forward, read in the loss phase, is the step's
# product. A running buffer the script keeps from the step's output is read there too:
# tests/clients/train_carried_buffer.py `--where loss` (`buf = buf * 0.5 + z.detach() *
# 0.5` after each forward, before its backward; the model adds `buf` to its first
# Linear's output) makes each step's buffer in the loss phase, and the next step reads it
# in its forward and, last, in its loss phase, where it makes the next buffer: each read
# `temporary`, by its lifetime (3 steps: resident `temporary` 1,056 B, step 3's buffer
# beside the output `z` and the loss; at the peak, step 2's backward, 2,592 B; `other` 0).
# What tells the buffer from a printed loss is what its last read makes: the
# next step's state (`buf * 0.5`, then the `add` that is the new `buf`, held past that
# step's end), where `.item()` makes nothing. So a candidate held into the next step and
# read there last outside a forward is the state too where the op of its last read made a
# storage that the next step made and held past its end, or made one whose last read did,
# and on (the chain of Note [Read by the next step], ledger/held_roles.py, a few links).
# It then reads as Note [A state no op saved] says, named by its holder (`buf (carried
# by the script)`; the last step's by the name). After: resident `temporary` 544, `other`
# 512; at the peak 2,080 and 512. The replay reads `cat_before`: no prediction moves.
# Cost: a short Python loop over the candidates read last outside a forward (a few a
# step), when the ledger loads. Pinned: tests/clients/test_carried_buffer.py.
def _begets_state(rows: np.ndarray, made: np.ndarray, created: np.ndarray,
                  last_use: np.ndarray, freed: np.ndarray, ends: np.ndarray,
                  j: np.ndarray) -> np.ndarray:
    """Per storage of `rows`: its last read made, directly or through storages each made
    at the last read of the one before, a storage of `made` in a later step held past that
    step's end (Note [A state the script updates outside the forward])."""
    out = np.zeros(len(made), dtype=bool)
    order = np.argsort(created, kind="stable")
    at = created[order]
    kept = made & ((freed < 0) | (freed > ends[np.minimum(j, len(ends) - 1)]))
    for r in np.flatnonzero(rows).tolist():
        ev, seen = int(last_use[r]), set()
        for _ in range(_LINKS):
            lo, hi = np.searchsorted(at, [ev, ev + 1])
            here = order[lo:hi]
            if not len(here):
                break
            if (kept[here] & (j[here] > j[r])).any():
                out[r] = True
                break
            nxt = int(last_use[here[0]])
            if nxt <= ev or nxt in seen:
                break
            seen.add(ev := nxt)
    return out


_LINKS = 8   # links of a chain followed (`buf * a + out * b`: two)


# Note [A carried state, named by its holder]
# A state the script carries read `other` in `show`'s tables unnamed, by the op that made
# it (`tanh in cell`, tests/clients/train_carried_state.py `--add`, 3 steps: the peak's
# 512 B of `other`, and the idle table's first row, 512 B x 3 over 119 events), as if the
# model held it. The script holds it, under a name: the `holders` record of the step end
# it is carried from (Note [Who holds a saved storage at a step's end], trace/
# step_holders.py) lists the names of the frames that hold it there, so from that end it
# is named by them, `h (carried by the script)`, as a gradient kept past its step is
# `weight (a past gradient)`; until that end it is the activation it was, and keeps the
# activation's name (`name_before`). The variable without its function where one function
# of the run holds a saved storage under that name (`main:h` -> `h`, `fn:self.h` ->
# `self.h`), with it where two do or a library's frame does (Note [One name, one holder]):
# the table's module column says where the op ran, and the record's name is the script's
# own word for it. Several names holding one storage (`h` and `states[1]` in `--states`)
# are all written, in the record's order (the innermost frame first, then its variables'
# order). A state carried with no record at its end (an older ledger) keeps its op's name.
# The holder at the end it is carried from, not at the event shown (decided, fifty-sixth
# session): at `--add`'s peak, step 1's state is held by `carried`, the detached alias step
# 2 binds, and `show` says `h`. A row is one storage over its whole life and the idle
# table counts like rows under one name (`h (carried by the script)` x 3): named by the
# holder at each event, the same state would read `h` in one table and `carried` in the
# other, and three steps' states under two names; the name it is carried out of its step
# by is the one the loop binds its state to every step, the reader's word for the state.
# Where the holder at the peak matters (a leak), `doctor` names the variable at its line.
def carried_names(index: pd.Index, carried: np.ndarray, holders: list) -> np.ndarray:
    """Per storage of `index`, `h (carried by the script)` from the names that hold it at
    its `carried` event, "" where none or not carried (Notes [A carried state, named by its
    holder] and [One name, one holder])."""
    out = np.full(len(index), "", dtype=object)
    if not len(holders) or not (carried >= 0).any():
        return out
    recs = _records(holders)
    libs = {fn for r in holders for fn in (r.get("libs") or ())}
    # the names that hold a saved storage, and those that hold an unsaved carried state
    # (Note [A state no op saved]): a name holding the step's other products is no holder
    saved = {name for _, name, _ in _records(holders, ("names",))}
    rows = index.get_indexer([x for _, _, sids in recs for x in sids])
    at, held_state = 0, set()
    for ev, name, sids in recs:
        hit = rows[at:at + len(sids)]
        at += len(sids)
        if name not in saved and ((hit >= 0) & (carried[np.maximum(hit, 0)] == ev)).any():
            held_state.add(name)
    shown = _shown_names([name for _, name, _ in recs if name in saved | held_state], libs)
    rows = iter(rows.tolist())
    names: dict[int, list[str]] = {}
    for ev, name, sids in recs:   # one `get_indexer` over every record (a long run's many)
        for row in (next(rows) for _ in sids):
            if row >= 0 and carried[row] == ev and name in shown and \
                    name not in names.setdefault(row, []):
                names[row].append(name)
    for row, held in names.items():
        # Note [The holder a user acts on]: the script's names where the script holds it
        mine = [n for n in held if not shown[n][1]]
        held = mine or held
        vs = list(dict.fromkeys(shown[n][0] for n in held))
        who = "the script" if mine else ", ".join(dict.fromkeys(shown[n][1] for n in held))
        out[row] = f"{', '.join(vs)} (carried by {who})"
    return out


# Note [The holder a user acts on]
# A state held at the end it is carried from by both a frame of the script and a
# library's (a library's loop that keeps `h` and hands it to the script's callback; a
# trainer that writes it into the script's dict, `state["h"] = h`, as
# tests/clients/train_carried_runner.py `--runner dict` does) was named by every holder
# under `the script`: `state['h'], fit.h (carried by the script)`, the library's local
# read as the script's word. The name is for the reader to act on (Note [A carried state,
# named by its holder]: the script's own word for it), and what a user acts on is the
# code they write: a script's variable they can detach, delete, move or stop keeping; a
# library's local only through the library's options. The script's hold is also the one
# that outlives the library's loop (the dict is the script's after `fit` returns). So
# where a script's frame holds it, only the script's names are written, `carried by the
# script`; the library's names where no script frame does (`fit.h (carried by pkg)`).
# A library's names count for no script name's function either (Note [One name, one
# holder]): a library's name is always written with its function, so `fit:h` beside
# `main:h` makes two holders of `h` that no reader confuses.


# Note [One name, one holder]
# A `holders` name is `function:variable` (Note [A loop a library runs], trace/
# step_holders.py), and `show` wrote the variable alone: tests/clients/
# train_carried_runner.py `--runner function` (each step `h = train_chunk(..., h)`, which
# binds its new state to its own `h`) named the state `h (carried by the script)`, the
# name `main`'s `h` has too, where `main`'s holds the step before's state at that end: two
# variables read as one. So the variable is written alone only where one function of the
# run's records holds a saved storage under that name; where two do, with its function:
# `train_chunk.h (carried by the script)`. A library's frame is always named with its
# function and the library (`fit.h (carried by memledger_test_tbptt)`, the record's
# `libs`): its variable is none of the script's words. A row held by names of both is
# named by the script's alone (Note [The holder a user acts on]).
def _shown_names(names: list[str], libs: set[str]) -> dict[str, tuple[str, str]]:
    """{record name: (shown name, the library that holds it or "")} (Note [One name, one
    holder])."""
    split = {n: (n.partition(":")[0], n.partition(":")[2] or n) for n in names}
    owners: dict[str, set[str]] = {}
    for fn, var in split.values():
        if fn not in libs:   # Note [The holder a user acts on]
            owners.setdefault(var, set()).add(fn)
    out = {}
    for n, (fn, var) in split.items():
        lib = fn.partition(".")[0] if fn in libs else ""
        short = fn.rpartition(".")[2]
        out[n] = (f"{short}.{var}" if lib or len(owners.get(var, ())) > 1 else var, lib)
    return out


def _held_as_state(index: pd.Index, carried: np.ndarray, close: int,
                   holders: list) -> np.ndarray:
    """Per storage: held at the step end `close` by a name that, at an earlier step's end,
    held a storage carried from that end (`carried` its event: Note [The last step's
    state, by its holder])."""
    recs = _records(holders)
    flat = [s for _, _, sids in recs for s in sids]
    rows = iter(index.get_indexer(flat).tolist())
    state: set[str] = set()
    at_close: dict[str, list[int]] = {}
    for ev, name, sids in recs:
        held = [r for r in (next(rows) for _ in sids) if r >= 0]
        if ev == close:
            at_close.setdefault(name, []).extend(held)
        elif ev < close and any(carried[r] == ev for r in held):
            state.add(name)
    out = np.zeros(len(index), dtype=bool)
    for name in state & set(at_close):
        out[at_close[name]] = True
    return out


def _records(holders: list, keys: tuple[str, ...] = ("names", "made")
             ) -> list[tuple[int, str, list[int]]]:
    """(event, name, sids) per name of each `holders` record: the saved storages it holds
    (`names`) and the unsaved ones its step made (`made`: Note [A state no op saved])."""
    out: dict[tuple[int, str], list[int]] = {}
    for r in holders:
        ev = int(r["ev"])
        for key in keys:
            for name, sids in (r.get(key) or {}).items():
                out.setdefault((ev, name), []).extend(int(x) for x in sids)
    return [(ev, name, sids) for (ev, name), sids in out.items()]
