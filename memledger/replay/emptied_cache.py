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
graph. predict refuses a re-run call holding a fill of a module that was emptied before
every call (two calls or more, each a fill: the re-run's path, the full cache, is one no
traced call ran) under selective (the slice is an op its forward never ran; a cache
reused on a later call `_refuse_selective_reused` in engine.py refuses already, in its own
line), and of a module emptied before every call or whose cache a later call reused
(made none) under checkpoint where the fill has a graph (what its ops saved, the re-run
does not save again). measure notes, as each re-run starts, the region's buffers that
hold a tensor now and held none as its first run began, and where torch's checkpoint
refuses the re-run says predict's line (measure/apply.py `checkpoint_refusal`); torch's
selective checkpoint it names by the op it met, as before. Not refused: a module whose
later call replaced a full buffer by one it made without reading it (Note [A state filled
on the first call]: one that read it) (it makes its buffer on every call, and
so does the re-run); a fill without a graph under checkpoint
(a rotary table or a causal mask made from nothing that needs a gradient: the re-run's
slice saves what the forward's product saved, nothing, and torch's checkpoint runs it);
a trace with one call of the module (a cache and a buffer made anew on every call look
the same there, as in Note [A cache kept as a plain attribute]). Offload re-runs nothing.
A checkpoint's re-run of a fill without a graph finds the cache full too and makes
none of what the fill made (the distances, the bias: `skipped_fills`); the replay re-made
them: `--case fixed` of train_emptied_cache.py, `checkpoint:blocks.*` 43,008 B predicted
against 42,752 B measured (the 8 x 8 fp32 bias, 256 B), now as measured.
Older ledgers' `kept` records have no `fill`: read as before.

# Note [A state filled on the first call]
A spiking neuron keeps its membrane as a buffer that starts empty, a tensor of no elements
(sinabs' `StatefulLayer` registers `torch.zeros(0)` and tests `shape == [0]`; tests/clients/
train_kept_state.py, train_sinabs.py): its first call fills it (zeros of the batch's shape,
then the last time step's membrane, with a graph), and each later call carries it on,
reading the one before (the loop resets it in place between samples). Backward's first
re-run is step 1's call: it finds the buffer full, holding the membrane its forward left,
skips the fill and runs the carry's ops (`a * v` with `v` needing a gradient saves one more
tensor), and torch's checkpoint raises ("Recomputed values ... have different metadata").
The trace took the empty tensor for a buffer held (no `fill`), and the later call's
replace made the module one "made anew on every call"; predict said of `checkpoint:1`
"whose forward replaces 1.v by a tensor made from the one before" (step 2's call, Note
[State a re-run writes again], replay/stateful.py), of `selective:1` "made a buffer of 1
anew from the one before, and the next call, reading it, ran other ops" (step 1's call, not
made from the one before), and measure of both "cannot re-run 1: torch's checkpoint found
the re-run unlike the first run". A buffer that held a tensor of no elements as the call
began now counts as empty for `fill` (trace/collector.py `_empty_bufs`, one set per call
of a module with buffers), and as empty for measure's `_full_buffers`; a fill whose later
calls each replaced the buffer from the one before (`stateful` OWN_STATE records:
`carried`) is refused as a cache's is (checkpoint with a graph, selective always), and its
line comes first on one call (engine.py `found`). Both sides say one line,
`emptied_cache_message`, in words true of what both know (the buffer empty as the call
began, full as its re-run begins: a cache or a carried state; measure, failing in step
1's backward, has seen no later call). A later call that replaced the buffer without
reading it still makes it "made anew on every call": not refused.
With one call of the module traced (one step) predict cannot tell the two apart: the one
call filled an empty buffer, and a module that makes its buffer anew on every call
(`self.v = f(x)`, never reading the old) fills it so too, and its re-run makes it again as
the forward did (torch's checkpoint runs it); which of the two a module is rests on a
Python test of the buffer's shape (`if self.v.shape != x[:, 0].shape`), which no
dispatched op records and which a second call alone shows (it reads the old one, or does
not). predict priced that call (train_kept_state.py at one step: `checkpoint:1` and
`selective:1` 16,068 B; sinabs' dense net 23,640 B) where measure, whose re-run fails in
step 1's backward whatever the steps, refuses both in this line. A fill with a graph on
the module's only traced call is now refused under checkpoint and selective in the same
line (fifty-fourth session): measure refuses the state, the common case, and a rebuild
is told from it by the second call a two-step trace holds. The cost: a module that makes
a buffer with a graph anew on every call, its first call finding it empty (a buffer
registered as `None` or `zeros(0)`), traced for one step, is refused by predict where
measure prices it (a plain-torch `self.v = torch.tanh(self.fc(x))`: 13,736 B on both
sides at two steps); the line says what the trace saw (the buffer filled, found full by
the re-run), and two steps price it. A fill without a graph on one call stays priced
(a causal mask or a rotary table made on the first call: their re-run under checkpoint
saves nothing more).

# Note [A fill a selective re-run finds full]
Under selective, torch's cache raises on the first op the re-run runs that its forward did
not ("... encountered during backward but not found in storage"), and measure named that
op: `--case fixed` of train_emptied_cache.py (a cache without a graph, emptied before every
call), `selective:blocks.*`: predict "whose forward call filled an empty buffer of
blocks.1.pos, ..., which torch's selective checkpoint cannot replay", measure "re-ran
blocks.1 and met aten.alias.default that its forward did not run (under autocast: ...; or a
buffer or attribute the forward made and the re-run found)": one cause, two lines. measure
now says the fill's line there too, where the region's modules hold a buffer they held
none under (or one of no elements) as its forward began (`_filled_since`, which also says
whether a buffer it filled has a graph: without one, selective's words, as predict's
`selective_plain`). And predict's selective refusal of a first fill that later calls
reuse (engine.py `_refuse_selective_reused`) says this line where the trace saw the
buffer empty as the call began (`fill`), not "made a buffer of X that later calls reuse":
PaLM-rlhf-pytorch's `selective:layers.*` (`layers.1.fn.attend`) now reads one line on both
sides. Left: a cache kept by a module outside the region (train_mech.py `--case
cached_bias`, `pos` shared by the blocks; x-transformers' `rel_pos`): measure watches the
region's own modules, so it still names the op (`aten.slice.Tensor`) where predict names
the fill; a buffer made anew from the one before whose next call ran other ops (`--case
running_range`): measure names `aten.mul.Tensor`, predict the remade buffer.
"""

from __future__ import annotations

import numpy as np


def skipped_fills(kept_fill: dict, kept: tuple, scope_mod: np.ndarray,
                  scope_ev0: np.ndarray, scope_ev1: np.ndarray) -> list[tuple[int, int]]:
    """(first event, one past the last) of each fill without a graph whose re-run would
    find the cache full: the module was emptied before every call, or a later call
    reused the cache. A checkpoint's re-run slices the cache and makes none of what the
    fill made (Note [A cache emptied before every call])."""
    out = []
    for mod, firsts, starts, reused, emptied, _ in _modules(kept_fill, kept, scope_mod,
                                                             scope_ev0, scope_ev1):
        for e, f in firsts.items():
            if f == 1 and (emptied or any(r > e for r in reused)):
                out.append((e, int(scope_ev1[(scope_mod == mod) & (scope_ev0 == e)].max())))
    return out


def _modules(kept_fill: dict, kept: tuple, scope_mod: np.ndarray, scope_ev0: np.ndarray,
             scope_ev1: np.ndarray, carried: frozenset = frozenset()):
    """Per module with fills: (module, {first event: fill}, its calls' first events, those
    that made no buffer, emptied before every call, the first events of its calls that
    replaced a full buffer from the one before: `carried`, Note [A state filled on the
    first call]). Not a module one of whose later calls replaced a full buffer by one
    made anew, without reading it (it makes its buffer on every call, as the re-run
    does)."""
    fills: dict[str, dict[int, int]] = {}
    for (mod, e), f in kept_fill.items():
        fills.setdefault(mod, {})[e] = f
    made: dict[str, set[int]] = {}
    for mod, e in kept:
        made.setdefault(mod, set()).add(e)
    for mod, firsts in fills.items():
        mine = (scope_mod == mod) & (scope_ev1 > scope_ev0)
        starts = [int(e) for e in scope_ev0[mine]]
        replaced = [e for e in starts if e in made[mod] and e not in firsts]
        if any((mod, e) not in carried for e in replaced):
            continue   # a later call replaced a full buffer: made anew on every call
        reused = [e for e in starts if e not in made[mod]]
        yield mod, firsts, starts, reused, len(starts) >= 2 and not reused, replaced


def emptied_cache_calls(kept_fill: dict, kept: tuple, scope_mod: np.ndarray,
                        scope_ev0: np.ndarray, scope_ev1: np.ndarray, ev0: np.ndarray,
                        ev1: np.ndarray, checkpoint: np.ndarray, selective: np.ndarray,
                        read: np.ndarray,
                        carried: frozenset = frozenset()) -> list[tuple[int, str, bool]]:
    """(selected call, module, selective on a fill without a graph) per re-run call
    (`read`) holding a fill the re-run would find full (Note [A cache emptied before
    every call]). `kept_fill`: (module, first
    event) -> 1 or 2; `kept`: (module, first event) of every call that made a buffer;
    `checkpoint`, `selective`: masks over the selected calls `ev0`/`ev1`; `carried`:
    (module, first event) of the calls that replaced a buffer of theirs from the one
    before (Note [A state filled on the first call])."""
    bad = []
    for mod, firsts, starts, reused, emptied, later in _modules(
            kept_fill, kept, scope_mod, scope_ev0, scope_ev1, carried):
        for e, f in firsts.items():
            k = int(np.searchsorted(ev0, e, side="right")) - 1
            if k < 0 or e >= ev1[k] or not read[k]:
                continue
            state = any(r > e for r in later)   # a later call carried on what it filled
            # one call with a graph: a state, or made anew? Note [A state filled on the
            # first call]
            alone = len(starts) == 1 and f == 2
            if selective[k] and (emptied or state or alone) or checkpoint[k] and f == 2 and \
                    (emptied or state or alone or any(r > e for r in reused)):
                bad.append((k, mod, bool(selective[k]) and f == 1))
    return bad
