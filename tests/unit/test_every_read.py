"""Every read the unpack records name, a later backward pass's too (`Prepared.read_*`):
what Note [Rounds of a read-back, replayed] (memledger/replay/engine.py) replays."""

import numpy as np

from memledger.ledger.model import Ledger
from memledger.replay.prepared import Prepared


def _ledger(sev: bool = True) -> Ledger:
    """Storage 0 (64 B) saved by `a` at event 2 and twice at event 4 (an op saving its
    output, and the next op saving it as its input); storage 1 (32 B) saved at 6. Two
    backward passes: the first reads the saves at 4 (10, 11) and at 2 (12), the second
    at 4 (20, 21) and storage 1 (22). `sev=False`: as a ledger older than `sev` wrote it."""
    recs = [{"k": "header", "schema": "memledger.ledger/1"},
            {"k": "phase", "ev": 0, "ph": "forward", "step": 1},
            {"k": "alloc", "sid": 0, "ev": 1, "bytes": 64, "dev": "cpu", "op": "mm.default",
             "mod": "a", "ph": "forward", "step": 1},
            {"k": "saved", "sid": 0, "ev": 2, "mod": "a"},
            {"k": "saved", "sid": 0, "ev": 4, "mod": "a"},
            {"k": "saved", "sid": 0, "ev": 4, "mod": "b"},
            {"k": "alloc", "sid": 1, "ev": 5, "bytes": 32, "dev": "cpu", "op": "mm.default",
             "mod": "b", "ph": "forward", "step": 1},
            {"k": "saved", "sid": 1, "ev": 6, "mod": "b"},
            {"k": "phase", "ev": 9, "ph": "backward", "step": 1},
            {"k": "unpack", "sid": 0, "ev": 10, "end": 13, "sev": 4},
            {"k": "unpack", "sid": 0, "ev": 11, "end": 13, "sev": 4},
            {"k": "unpack", "sid": 0, "ev": 12, "end": 14, "sev": 2},
            {"k": "unpack", "sid": 0, "ev": 20, "sev": 4},
            {"k": "unpack", "sid": 0, "ev": 21, "end": 25, "sev": 4},
            {"k": "unpack", "sid": 1, "ev": 22, "end": 23, "sev": 6},
            {"k": "free", "sid": 0, "ev": 30, "last": 21},
            {"k": "free", "sid": 1, "ev": 31, "last": 22},
            {"k": "step", "step": 1, "ev": 32, "ns": 10_000},
            {"k": "end", "ev": 33, "status": "ok"}]
    if not sev:
        recs = [{k: v for k, v in r.items() if k != "sev"} for r in recs]
    return Ledger.from_records(recs)


def test_each_pass_reads_the_saves_of_one_event_latest_first():
    """The n-th unpack naming (storage, event) reads the (n mod saves)-th latest save made
    there, in each pass; an unpack with no `end` ends one event after it."""
    prep = Prepared.from_ledger(_ledger())
    mods = prep.pack_mod_names[prep.pack_mod_code]
    reads = [(str(mods[j]), int(prep.pack_ev[j]), int(e), int(end))
             for j, e, end in zip(prep.read_pack, prep.read_ev, prep.read_end)]
    assert reads == [("b", 4, 10, 13), ("a", 4, 11, 13), ("a", 2, 12, 14),
                     ("b", 4, 20, 21), ("a", 4, 21, 25), ("b", 6, 22, 23)]


def test_a_subset_keeps_its_saves_reads_renumbered():
    """`Prepared.subset` (plan's blocks) cuts the save records to the kept storages; the
    reads point at the kept saves' new indices."""
    prep = Prepared.from_ledger(_ledger())
    keep = np.asarray(prep.nbytes) == 32
    sub = prep.subset(keep)
    assert len(sub.pack_row) == 1
    assert sub.read_pack.tolist() == [0] and sub.read_ev.tolist() == [22]
    assert sub.read_end.tolist() == [23]


def test_an_older_ledger_has_no_reads():
    """Unpack records that name no save (ledgers before `sev`): nothing to replay."""
    prep = Prepared.from_ledger(_ledger(sev=False))
    assert prep.read_pack is None and prep.read_ev is None
    assert len(prep.pack_row) == 4
