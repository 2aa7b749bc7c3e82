"""The backward passes that read a re-run call's own saves, one backward phase each (Note
[A re-run in each of N backward passes], replay/engine.py). No torch."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from memledger.replay.prepared import Prepared


@dataclass(frozen=True)
class OwnReads:
    """Every unpack of a save made by the call that made the saved storage (a storage a
    later call saves too is read through that call's save as well: not here)."""

    row: np.ndarray      # per read: the storage
    phase: np.ndarray    # per read: its backward phase (an index into `phase_bw_start`)
    ev: np.ndarray       # per read: its event
    end: np.ndarray      # per read: when its node returned (one past the read, unknown)
    last: np.ndarray     # per storage: the last backward phase those reads come in (-1)
    # per storage: where those reads come in three backward phases or more (and three
    # passes read one save of it), the first of them in the last (where its call's last
    # re-run starts); -1 else
    last_first: np.ndarray


def own_reads(prep: Prepared, kp: np.ndarray, made: np.ndarray) -> OwnReads | None:
    """`kp`: the call of each save (`_pack_call`), `made`: the call that made each storage.
    None where the ledger's unpacks name no save, it has no backward phase, or no save of
    it is read by three passes (two are `pass2`'s: nothing to add, nothing to pay)."""
    starts = prep.phase_bw_start
    if prep.read_pack is None or not len(prep.read_pack) or starts is None or \
            not len(starts) or not len(kp) or prep.passes_read is None or \
            not (prep.passes_read >= 3).any():
        return None
    n = len(prep.created)
    row = prep.pack_row[prep.read_pack]
    mine = (kp[prep.read_pack] >= 0) & (kp[prep.read_pack] == made[row])
    row, ev = row[mine], prep.read_ev[mine]
    end = np.maximum(prep.read_end[mine], ev + 1)
    phase = np.searchsorted(starts, ev, side="right") - 1
    last = np.full(n, -1, dtype=np.int64)
    np.maximum.at(last, row, phase)
    phases = _phases_per_storage(row, phase, n, len(starts))
    first = np.full(n, np.iinfo(np.int64).max, dtype=np.int64)
    in_last = phase == last[row]
    np.minimum.at(first, row[in_last], ev[in_last])
    return OwnReads(row=row, phase=phase, ev=ev, end=end, last=last,
                    last_first=np.where((phases >= 3) & (prep.passes_read >= 3), first, -1))


def one_phase_per_pass(prep: Prepared) -> np.ndarray:
    """Per storage: the backward passes that read a save of it (`passes_read`) came each in
    a backward phase of its own, none a graph-building one, every read inside a backward
    phase: a truncated-BPTT loop's `loss.backward(retain_graph=True)` per chunk, through
    the chunks before. Not a power series of `autograd.grad` inside one forward (normflows'
    residual flow), nor passes a node's backward runs inside another (torchjd)."""
    n = len(prep.created)
    starts, ends = prep.phase_bw_start, prep.phase_bw_end
    if prep.passes_read is None or prep.graph_reads is None or prep.read_pack is None or \
            starts is None or not len(starts) or not len(prep.read_pack):
        return np.zeros(n, dtype=bool)
    row = prep.pack_row[prep.read_pack]
    phase = np.searchsorted(starts, prep.read_ev, side="right") - 1
    inside = (phase >= 0) & (prep.read_ev < ends[np.maximum(phase, 0)])
    outside = np.zeros(n, dtype=bool)
    outside[row[~inside]] = True
    # one read per save a phase (`x * x` saves `x` twice at one event: two saves, two reads)
    save_phase = np.unique(np.stack([prep.read_pack, phase]), axis=1)
    reads = np.bincount(row, minlength=n)
    once = np.bincount(prep.pack_row[save_phase[0]], minlength=n) == reads
    ok = (_phases_per_storage(row, phase, n, len(starts)) == prep.passes_read) & once & \
        ~outside & (prep.graph_reads == 0)
    if prep.unpack_unnamed is not None:   # a re-run of the script's own checkpoint
        ok &= ~prep.unpack_unnamed
    return ok


def _phases_per_storage(row: np.ndarray, phase: np.ndarray, n: int, phases: int) -> np.ndarray:
    """Per storage: the distinct backward phases among reads (`row`, `phase`)."""
    key = np.unique(row.astype(np.int64) * (phases + 1) + (phase + 1))
    return np.bincount(key // (phases + 1), minlength=n)
