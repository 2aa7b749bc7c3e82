"""Re-runs of a call that filled its module's empty cache, which the re-run finds full. No
torch.

# Note [A cache emptied before every call]
A module may fill a buffer on a call that finds it empty and return it on later calls
(Note [A buffer a call makes and later calls reuse], trace/collector.py). tranception-
pytorch's `LearnedAlibiPosBias` caches its bias, `distances * self.slopes` (learned
slopes: the bias has an autograd graph), with `register_buffer` in its first forward, so a
second step's backward runs into the first step's freed graph; a loop that trains it
empties the cache before each forward (`m.bias = None`,
tests/clients/train_tranception.py). Every traced call then filled an empty cache, none
reused one, and the replay took the module for one that makes its buffer anew on every
call, whose re-run makes it again. The re-run in backward is the one call that finds the
cache full: it slices the cached bias, skips the product that saved the slopes, and
torch's checkpoint raises ("A different number of tensors was saved during the original
forward and recomputation"); torch's selective checkpoint meets a view op its forward
never ran. measure refused `checkpoint:layers.*.*` and `selective:@Attention` while
predict priced them (193,972 B and 234,028 B on the 2-block model, 2 steps).

The trace's `kept` record now says `fill`: 1 where the call put a tensor under a buffer
name its module held none under as the call began, 2 where one such has an autograd
graph. predict refuses a re-run call holding a fill of a module that
- was emptied before every call (two calls or more, each a fill: the re-run's path, the
  full cache, is one no traced call ran), under selective, or under checkpoint where the
  fill has a graph (what its ops saved, the re-run does not save again); or
- reused the cache on a later call (made none), under checkpoint where the fill has a
  graph (the selective side of that is `_refuse_selective_reused`, engine.py).
Not refused: a module whose later call replaced a full buffer by one it made (it makes
its buffer on every call, and so does the re-run); a fill without a graph under checkpoint
(a rotary table or a causal mask made from nothing that needs a gradient: the re-run's
slice saves what the forward's product saved, nothing, and torch's checkpoint runs it);
a trace with one call of the module (a cache and a buffer made anew on every call look
the same there, as in Note [A cache kept as a plain attribute]). Offload re-runs nothing.
Older ledgers' `kept` records have no `fill`: read as before.
"""

from __future__ import annotations

import numpy as np


def emptied_cache_calls(kept_fill: dict, kept: tuple, scope_mod: np.ndarray,
                        scope_ev0: np.ndarray, scope_ev1: np.ndarray, ev0: np.ndarray,
                        ev1: np.ndarray, checkpoint: np.ndarray, selective: np.ndarray,
                        read: np.ndarray) -> list[tuple[int, str]]:
    """(selected call, module) per re-run call (`read`) holding a fill the re-run would
    find full (Note [A cache emptied before every call]). `kept_fill`: (module, first
    event) -> 1 or 2; `kept`: (module, first event) of every call that made a buffer;
    `checkpoint`, `selective`: masks over the selected calls `ev0`/`ev1`."""
    fills: dict[str, dict[int, int]] = {}
    for (mod, e), f in kept_fill.items():
        fills.setdefault(mod, {})[e] = f
    made = {}
    for mod, e in kept:
        made.setdefault(mod, set()).add(e)
    bad = []
    for mod, firsts in fills.items():
        mine = (scope_mod == mod) & (scope_ev1 > scope_ev0)
        starts = [int(e) for e in scope_ev0[mine]]
        if any(e in made[mod] and e not in firsts for e in starts):
            continue   # a later call replaced a full buffer: made anew on every call
        reused = [e for e in starts if e not in made[mod]]
        emptied = len(starts) >= 2 and not reused
        for e, f in firsts.items():
            k = int(np.searchsorted(ev0, e, side="right")) - 1
            if k < 0 or e >= ev1[k] or not read[k]:
                continue
            if selective[k] and emptied or \
                    checkpoint[k] and f == 2 and (emptied or any(r > e for r in reused)):
                bad.append((k, mod))
    return bad
