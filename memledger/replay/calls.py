"""Which selected module call an event belongs to (sorted, disjoint calls). No torch."""

from __future__ import annotations

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
                                                     prep.saved_mod_code, prep.saved_mod_names))


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
                own_output: np.ndarray | None = None) -> np.ndarray:
    """`save_call` for save records at events `s` by modules `mod_names[mod_code]`.

    `own_output` (bool per record, `output_saves`): the save of an op's own output. Two
    calls of one module back to back (ALBERT's shared layer) share the boundary event and
    both contain the saving module; there the record is the earlier call's when its last
    op saved what it made (its final LayerNorm's mean and rstd, 256 B each at (2, 32, 1):
    read as the next call's, kept through forward, the replay's peak 512 B over), else the
    later call's (its first op saving its input)."""
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
                        own_output)
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
    if own_output is not None:
        in_b &= ~(in_a & own_output & (s < ev0[bb]))
    return np.where(in_b, b, np.where(in_a, a, -1))


def which_call(ev0: np.ndarray, ev1: np.ndarray, e: np.ndarray, n: int) -> np.ndarray:
    """Index of the call whose [ev0, ev1) holds each event in `e`, else -1 (calls sorted by
    ev0 and disjoint). `n`: the event count (unused by the search; kept for callers)."""
    if not len(ev0):
        return np.full(len(e), -1, dtype=np.int64)
    k = np.searchsorted(ev0, e, side="right") - 1
    ok = (k >= 0) & (e >= 0) & (e < ev1[np.maximum(k, 0)])
    return np.where(ok, k, -1)
