"""Note [Objects from before the script] (memledger/trace/script.py): the script runs with
every object that existed before it frozen for the garbage collector, sees and collects
its own objects as before, and an in-process caller gets its process back unfrozen."""

from __future__ import annotations

import gc
import json

from memledger.errors import EXIT_OK
from memledger.trace.script import earlier_objects_frozen, run_and_classify

SCRIPT = """
import gc, json, sys, weakref
import torch

class Cycle:   # garbage only the cyclic collector frees
    def __init__(self):
        self.me = self
        self.t = torch.zeros(4)

made = torch.ones(3, requires_grad=True) * 2
ids = {id(o) for o in gc.get_objects()}
c = Cycle()
gone = weakref.ref(c)
del c
gc.collect()
json.dump({"frozen": gc.get_freeze_count(), "sees_its_own": id(made) in ids,
           "marker_seen": any(getattr(o, "marker", None) == "before" for o in gc.get_objects()),
           "cycle_collected": gone() is None}, open(sys.argv[1], "w"))
"""


class _Before:
    marker = "before"


def test_the_script_runs_with_earlier_objects_frozen(tmp_path):
    script, out = tmp_path / "train.py", tmp_path / "out.json"
    script.write_text(SCRIPT)
    before = [_Before()]   # a container of the caller's, alive through the run
    assert gc.get_freeze_count() == 0
    outcome = run_and_classify(script, [str(out)])
    assert outcome.code == EXIT_OK, outcome.reason
    seen = json.loads(out.read_text())
    assert seen["frozen"] > 10_000           # torch, Dynamo, memledger and the caller's
    assert seen["sees_its_own"] is True       # the doctor's scans still find its tensors
    assert seen["marker_seen"] is False       # ...and not the objects from before it
    assert seen["cycle_collected"] is True    # its own cycles are collected as before
    assert gc.get_freeze_count() == 0         # the caller's process, thawed again
    assert any(o is before for o in gc.get_objects())


def test_only_the_outermost_freeze_thaws():
    with earlier_objects_frozen():
        outer = gc.get_freeze_count()
        with earlier_objects_frozen():
            pass
        assert gc.get_freeze_count() >= outer > 0   # a zygote's child stays frozen
    assert gc.get_freeze_count() == 0
