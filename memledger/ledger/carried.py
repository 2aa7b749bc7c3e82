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
has no next one: a storage of it held past its end reads `other` from there where an
earlier step carried a storage made as it was (the same op, module and bytes: a loop
repeats, as Note [Read by the next step] reads a last step's state), so the output the
script holds until the next forward replaces it (saved by the loss, never read by the next
step) stays `activation`, on the last step as on the others. An earlier step, not the step
before: HRM's deep supervision hands a batch's first segment's states to its second, and
the second's to nothing (the next batch starts from none), so in 3 steps the step before
the last carried nothing, and the last (the next batch's first segment) holds at the close
what its second segment would read. A batch's last segment's states, held at the close of
a trace that ends there (2 steps), read `other` so too: held by the script after the
backward that read them, they are saved for none. A carried state the next step saves
again (`h_prev @ W_h`: the matmul saves its input) is saved for that step's backward and
stays `activation` its whole life, as before: one change of category per storage.

How: the columns of Note [A copy the optimizer keeps, then the parameter] (ledger/
held_roles.py), as Note [A gradient the script keeps past its step] uses them: the static
category `other` (what it is at the close: `resident`), `cat_before` `activation` until
`cat_until`. The queries at an event read them (`Ledger.live_at`, `curve_by_category`),
and the replay, whose rules read `activation` (what is saved, dropped, offloaded, what a
re-run makes again), reads `cat_before` for these (replay/prepared.py `_rule_categories`):
its rules and predictions are the old ones; only its lifetimes' labels cut at the same
place, so predict's breakdown reads as `show` does. Only the category moves: bytes,
curves and peaks are the same sums. Pinned: tests/clients/test_carried_state.py.
"""

from __future__ import annotations

import numpy as np


def carried_until(df, is_act: np.ndarray, key, phases: list, steps: list) -> np.ndarray:
    """Per storage of `df` (the ledger's storages frame, with its saves and unpacks), the
    event from which the activation reads `other` (its step's end), -1 where it stays an
    activation (Note [A state carried into the next step]); `key(rows)` says (op, module,
    bytes) of the rows asked."""
    n = len(df)
    out = np.full(n, -1, dtype=np.int64)
    fwd = np.array(sorted(int(r["ev"]) for r in phases if r.get("ph") == "forward"),
                   dtype=np.int64)
    ends = np.array(sorted(int(r["ev"]) for r in steps), dtype=np.int64)
    if not len(fwd) or not len(ends) or not is_act.any():
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
    out[read] = end[read]
    # the last step's, held past its end: made as a state an earlier step carried
    prev = read
    last = ok & (j == len(ends) - 1)
    if prev.any() and last.any():
        seen = set(key(np.flatnonzero(prev)))
        at = np.flatnonzero(last)
        hit = at[[k in seen for k in key(at)]]
        out[hit] = end[hit]
    return out
