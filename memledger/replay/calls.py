"""Which selected module call an event belongs to (sorted, disjoint calls). No torch."""

from __future__ import annotations

import weakref

import numpy as np

from memledger.replay.prepared import Prepared


def save_call(prep: Prepared, by_path: dict, mods: np.ndarray, ev0: np.ndarray,
               ev1: np.ndarray) -> np.ndarray:
    """The selected call during which each storage was first saved, else -1.

    Rule 5: a save record's event is the op before an input-saving op, so a call on events
    [ev0, ev1) owns saves recorded on [ev0 - 1, ev1 - 1], and a save at the boundary may
    be the last op of one call saving its output (MaxPool's indices) or the first op of the
    next saving its input. The save record's module tells them apart: a save on a call's
    boundary belongs to it only if the call's module path contains the module that saved.
    """
    rows = np.arange(len(prep.saved_first))
    return record_call(prep.saved_first, prep.saved_mod_code, prep.saved_mod_names, by_path,
                       mods, ev0, ev1, output_saves(prep, prep.saved_first, rows,
                                                     prep.saved_mod_code, prep.saved_mod_names),
                       scopes_of(prep))


def scopes_of(prep: Prepared) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """(module, first event, one past the last) of every forward call, for `record_call`'s
    boundary saves by modules a region shares (Note [A boundary save by a shared module])."""
    if prep.scope_mod is None or not len(prep.scope_mod):
        return None
    return prep.scope_mod, prep.scope_ev0, prep.scope_ev1


def output_saves(prep: Prepared, s: np.ndarray, rows: np.ndarray, mod_code: np.ndarray,
                 mod_names: np.ndarray) -> np.ndarray | None:
    """Per save record (event `s`, storage row, saving module): an op saving its own output
    (LayerNorm's mean and rstd), recorded at the op that made it, by the module that made
    it; None for a ledger without the makers' modules."""
    if prep.made_mod is None or not len(s):
        return None
    saver = mod_names.astype(object)[mod_code] if len(mod_names) else \
        np.full(len(s), "", dtype=object)
    return (prep.created[rows] == s) & (prep.made_mod[rows] == saver)


def record_call(s: np.ndarray, mod_code: np.ndarray, mod_names: np.ndarray, by_path: dict,
                mods: np.ndarray, ev0: np.ndarray, ev1: np.ndarray,
                own_output: np.ndarray | None = None,
                scopes: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None) -> np.ndarray:
    """`save_call` for save records at events `s` by modules `mod_names[mod_code]`.

    `own_output` (bool per record, `output_saves`): the save of an op's own output. Two
    calls of one module back to back (ALBERT's shared layer) share the boundary event and
    both contain the saving module; there the record is the earlier call's when its last
    op saved what it made (its final LayerNorm's mean and rstd, 256 B each at (2, 32, 1):
    read as the next call's, kept through forward, the replay's peak 512 B over), else the
    later call's (its first op saving its input). `scopes` (`scopes_of`): the forward
    calls, by which a boundary save by a module named outside the region is the region's
    when that module's call ran inside it (Note [A boundary save by a shared module])."""
    if not len(ev0):
        return np.full(len(s), -1, dtype=np.int64)
    # a call that ran no op (a block whose forward returns its input) saves nothing, and
    # must not stand between a call and the save of its last op: three blocks, the last two
    # empty, left block 0's ReLU save (at its last event, its own output) to no call, so
    # `checkpoint:blocks.*` dropped nothing there, held neither block 0's input nor its RNG
    # state: 136,128 B under measured (tests/clients/train_random.py `none/relu_;none/;none/`)
    ran = np.flatnonzero(ev1 > ev0)
    if not len(ran):
        return np.full(len(s), -1, dtype=np.int64)
    if len(ran) < len(ev0):
        k = record_call(s, mod_code, mod_names, by_path, mods[ran], ev0[ran], ev1[ran],
                        own_output, scopes)
        return np.where(k >= 0, ran[np.maximum(k, 0)], -1)
    # distinct saving modules -> the selected region path that contains them, as a code
    paths = list(by_path)
    names = mod_names.astype(str)
    owner = np.full(len(names), -1, dtype=np.int64)
    for i, p in enumerate(paths):               # the first path that contains the module
        hit = (owner < 0) & ((names == p) | np.char.startswith(names, p + "."))
        owner[hit] = i
    path_ix = {p: i for i, p in enumerate(paths)}
    call_path = np.array([path_ix[m] for m in mods], dtype=np.int64)
    own = owner[mod_code] if len(owner) else np.full(len(s), -1, dtype=np.int64)
    b = np.searchsorted(ev0 - 1, s, side="right") - 1          # latest call with ev0-1 <= s
    bb = np.maximum(b, 0)
    # strictly inside a call, a save is the call's whatever module made it: a submodule
    # another block owns (shared: `blocks[2].fc1 = blocks[1].fc1`) is named by its first
    # path, and blocks.2's saves through it were once left to no call (+32,768 B)
    inside = (s >= ev0[bb]) & (s < ev1[bb] - 1)
    in_b = (b >= 0) & (s >= 0) & (s <= ev1[bb] - 1) & ((own == call_path[bb]) | inside)
    a = b - 1                                                   # the call before (adjacent)
    aa = np.maximum(a, 0)
    in_a = (a >= 0) & (s == ev1[aa] - 1) & (own == call_path[aa])
    if scopes is not None:   # Note [A boundary save by a shared module]
        names_of = mod_names.astype(object)[mod_code] if len(mod_names) else \
            np.full(len(s), "", dtype=object)
        edge_b = (b >= 0) & (s >= 0) & (s <= ev1[bb] - 1) & ~in_b
        in_b |= _ran_inside(edge_b, s, names_of, ev0[bb], ev1[bb], scopes)
        edge_a = (a >= 0) & (s == ev1[aa] - 1) & ~in_a
        in_a |= _ran_inside(edge_a, s, names_of, ev0[aa], ev1[aa], scopes)
    if own_output is not None:
        in_b &= ~(in_a & own_output & (s < ev0[bb]))
    return np.where(in_b, b, np.where(in_a, a, -1))


# Note [A boundary save by a shared module]
# A save record's event is the op before an input-saving op (Rule 5 of the replay), so a
# save on a call's first or last boundary may be the call's or its neighbour's, and the
# saving module's path decides: the call's if the region's path contains it. A module the
# region shares with another part of the model has the path `named_modules()` gives it
# first, outside the region's: MONAI's DynUNet runs its blocks through a recursive
# `skip_layers` whose every block is also `input_block`, `downsamples.i`, `upsamples.i`.
# `checkpoint:skip_layers` lost the last block's in-place LeakyReLU save (at the call's
# last event, `upsamples.2.conv_block.lrelu`): torch's checkpoint re-runs the region at
# that save's unpack, inside the CopySlices node that made three (1, 4, 32, 32, 32) fp32
# gradient buffers first, and replay placed the re-run at the next save's unpack, after
# the node: predicted 36,887,124 B, measured 37,411,284. A save by a module named outside
# the region is now the region's when that module's own forward call lies inside the
# region's and holds the record's event or the next (the op saving its input), and no
# call of it outside the region does: that is the module running as part of the region.
# Strictly inside a call nothing changes (every save there is the call's already).
# A save with no module path is the script's (the loss) or the root model's own op, and
# the root never runs inside one of its submodules; but its call may span exactly the
# region's: TabNet's forward is `self.tabnet(self.embedder(x))`, whose embedder runs no
# op without categorical columns, so the root call `""` and `tabnet` both hold events
# [3016, 3560). The loss's `mse_loss` saves the region's output at 3559 (its last event)
# under the path "", which read as the root running inside `tabnet`: the region's re-run
# then came at that save's unpack, before `mse_loss_backward` made its (128, 2) fp32
# gradient, where torch re-runs it after (the unpack of the region's own first save):
# `checkpoint:tabnet` predicted 1,024 B under measured (tests/clients/train_tabnet.py).

_BY_MODULE: dict[int, tuple[weakref.ref, dict]] = {}   # id(scope_mod) -> its index


def _calls_by_module(scopes: tuple[np.ndarray, np.ndarray, np.ndarray]) -> dict:
    """{module path: [(ev0, ev1) of each forward call]}, built once per ledger's scopes: a
    plan replays each block and option (288 replays on a 48-block GPT), and a scan of every
    scope per saving module in each, in numpy on arrays of two calls, made `plan` 0.2-0.3 s
    slower."""
    smod, sev0, sev1 = scopes
    kept = _BY_MODULE.get(id(smod))
    if kept is not None and kept[0]() is smod:
        return kept[1]
    index: dict[str, list[tuple[int, int]]] = {}
    for m, e0, e1 in zip(smod.tolist(), sev0.tolist(), sev1.tolist()):
        index.setdefault(str(m), []).append((e0, e1))   # few calls a module: plain ints
    _BY_MODULE.clear()   # one ledger at a time is enough
    _BY_MODULE[id(smod)] = (weakref.ref(smod), index)
    return index


def _ran_inside(cand: np.ndarray, s: np.ndarray, names: np.ndarray, lo: np.ndarray,
                hi: np.ndarray, scopes: tuple[np.ndarray, np.ndarray, np.ndarray]
                ) -> np.ndarray:
    """Per record (only where `cand`): the saving module `names` has a forward call inside
    [lo, hi) that holds event s or s + 1, and none outside it that does."""
    out = np.zeros(len(s), dtype=bool)
    idx = np.flatnonzero(cand)
    if not len(idx):
        return out
    by_name = _calls_by_module(scopes)
    for i, name, e, a, z in zip(idx.tolist(), names[idx].tolist(), s[idx].tolist(),
                                lo[idx].tolist(), hi[idx].tolist()):
        if not name:   # the script's own op, or the root's: never a module run inside
            continue
        held = [a <= e0 and e1 <= z   # inside the region's call, per call holding e or e+1
                for e0, e1 in by_name.get(name, ()) if e0 <= e + 1 and e1 > e]
        out[i] = any(held) and all(held)
    return out


def which_call(ev0: np.ndarray, ev1: np.ndarray, e: np.ndarray, n: int) -> np.ndarray:
    """Index of the call whose [ev0, ev1) holds each event in `e`, else -1 (calls sorted by
    ev0 and disjoint). `n`: the event count (unused by the search; kept for callers)."""
    if not len(ev0):
        return np.full(len(e), -1, dtype=np.int64)
    k = np.searchsorted(ev0, e, side="right") - 1
    ok = (k >= 0) & (e >= 0) & (e < ev1[np.maximum(k, 0)])
    return np.where(ok, k, -1)
