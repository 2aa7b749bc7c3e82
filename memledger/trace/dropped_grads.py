"""Gradient storages no parameter's `.grad` holds any longer, while the script still does.

# Note [A gradient dropped from .grad]
The grokfast paper's `gradfilter_ma` keeps each step's `p.grad.data.detach()` in a deque;
`zero_grad()` (set_to_none, torch's default) then drops `.grad`, and the storage lives on,
the script's. The ledger had no event for the drop: the categoriser moved such a storage
from `gradient` to `other` only at its parameter's next gradient (Note [A gradient the
script keeps past its step], ledger/held_roles.py), made in the next backward, so from
`zero_grad()` to there (the next batch, the whole forward, backward up to that parameter)
it read `gradient` beside no `.grad` at all. Nothing torch calls tells of the drop
(`zero_grad` has no hooks; `p.grad = None` is a descriptor's set), but it is cheap to see
afterwards: the collector watches each plain `.grad` storage it names as a gradient, with
the parameters whose `.grad` it is, and looks again where a drop may just have happened:
as `Optimizer.zero_grad`'s `record_function` closes (an op the dispatch mode already
sees), at a step's forward's start (`model.zero_grad()`, `p.grad = None` by hand), and
each time it names the gradients (backward's end, an optimizer step's hooks: a `.grad`
rebound to a new storage, `p.grad.data = ...`, or accumulated out of place because the
script held the old one). A watched storage still alive that none of its parameters'
`.grad` holds is written `{"k": "ungrad", "sid", "ev"}`: from `ev` on it is no gradient
(the ledger reads it `other`, the script's). Should it become a `.grad` again (a script
that saves gradients, clears them and puts them back), the collector writes `ev: -1` for
it (with `at`, when: Note [A gradient dropped from .grad, then put back]): the ledger
reads the last record for the storage's cut, and a storage with two lives as a gradient
keeps its role to the end of the last. Cost: one pass over the watched storages (one per parameter) at each of those
points, a few per step (about 1 us per parameter on this session's AMD EPYC); nothing on
the per-op path (the dispatch hook, pack and unpack). Pinned: tests/clients/
test_held_roles.py (`train_held_roles.py --ma 3`, `--model-zero`), tests/unit/
test_dropped_gradients.py.

# Note [A gradient dropped from .grad, then put back]
One cut per storage left a storage dropped, made a `.grad` again and dropped again reading
`gradient` from its making to its last drop, the time between the first drop and the
put-back included. tests/clients/train_held_roles.py `--put-back` (the script keeps each
`.grad`, clears them, runs a check forward under no_grad, puts the same tensors back,
steps; 2 steps, peak 13,260 B in the check forward): at the peak `gradient` 2,244 B, none
of them a `.grad`. The take-back record now says when the storage was seen a `.grad` again
(`at`, the event of the naming that found it: the optimizer step's pre-hook here), and
the ledger reads each drop followed by such a take-back as a span (`dropped_spans`,
ledger/held_roles.py; `Ledger.category_spans`): over [drop, at) the storage reads `other`
(`<parameter> (a past gradient)`), elsewhere as before. The three readers of a storage's
category over time read the spans: `live_at`, `curve_by_category` (the span's bytes
moved between the two categories), and the replay's lifetimes (engine.py `_lifetimes`,
the same move, so predict's breakdown agrees). After: at the peak `gradient` 0, `other`
2,244; resident as before. A take-back without `at` (older ledgers) gives no span. Only
categories move.
"""

from __future__ import annotations

import weakref

import torch

from memledger.trace.outside_state import storage_key


class DroppedGradients:
    """The `.grad` storages being watched (Note [A gradient dropped from .grad])."""

    def __init__(self) -> None:
        # storage key -> (sid, the parameters whose `.grad` it was)
        self._watch: dict[int, tuple[int, list[weakref.ref]]] = {}
        self._dropped: set[int] = set()   # sids written dropped, not yet taken back

    def held(self, p: torch.Tensor, key: int | None, sid: int | None) -> bool:
        """`p.grad`'s storage is `key` (sid `sid`); True if it had been dropped before (the
        caller writes that the drop is taken back)."""
        if key is None or sid is None or sid < 0:
            return False
        entry = self._watch.get(key)
        if entry is None or entry[0] != sid:
            self._watch[key] = (sid, [weakref.ref(p)])
        elif not any(r() is p for r in entry[1]):
            entry[1].append(weakref.ref(p))
        if sid in self._dropped:
            self._dropped.discard(sid)
            return True
        return False

    def look(self, alive: dict[int, int]) -> list[int]:
        """The watched storages (sids) still alive (`alive`: storage key -> sid) that none
        of their parameters' `.grad` holds now; they are watched no more."""
        out = []
        for key, (sid, refs) in list(self._watch.items()):
            if alive.get(key) != sid:          # freed (or its key reused)
                del self._watch[key]
                continue
            if any((p := r()) is not None and (g := p.grad) is not None and
                   storage_key(g) == key for r in refs):
                continue
            del self._watch[key]
            self._dropped.add(sid)
            out.append(sid)
        return out
