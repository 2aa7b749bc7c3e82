"""Note [Objects from before the script] (memledger/trace/script.py): the script runs with
every object that existed before it frozen for the garbage collector, sees and collects
its own objects as before, and an in-process caller gets its process back unfrozen."""

from __future__ import annotations

import gc
import json

import pytest

from memledger.errors import EXIT_OK
from memledger.processes import run_worker, several_workers
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


@pytest.mark.usefixtures("thawed")
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


@pytest.mark.usefixtures("thawed")
def test_only_the_outermost_freeze_thaws():
    with earlier_objects_frozen():
        outer = gc.get_freeze_count()
        with earlier_objects_frozen():
            pass
        assert gc.get_freeze_count() >= outer > 0   # a zygote's child stays frozen
    assert gc.get_freeze_count() == 0


COLLECTOR_STATE = """
import gc, json, sys
import torch
m = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(m.parameters(), lr=0.1)
for _ in range(2):
    m(torch.randn(2, 4)).sum().backward()
    opt.step()
json.dump({"enabled": gc.isenabled(), "frozen": gc.get_freeze_count()}, open(sys.argv[1], "w"))
"""


@pytest.mark.parametrize("warm", ["0", "1"])
@pytest.mark.slow   # among the suite's longest: run first (Note [The longest tests first])
def test_a_worker_runs_the_script_with_the_collector_on(tmp_path, monkeypatch, warm):
    """Note [Imports without the collector] (memledger/worker_start.py): a cold worker
    imports with the collector off, the zygote too; the script gets it back on, with the
    imports frozen, in either."""
    monkeypatch.setenv("MEMLEDGER_WARM_START", warm)
    script, out = tmp_path / "train.py", tmp_path / "out.json"
    script.write_text(COLLECTOR_STATE)
    with several_workers():   # warm starts, where MEMLEDGER_WARM_START allows them
        code, text = run_worker("memledger.doctor.worker",
                                ["--report", str(tmp_path / "r.json"), "--status",
                                 str(tmp_path / "s.json"), "--steps", "5", str(script),
                                 str(out)], capture_output=True)
    assert code == 0, text
    seen = json.loads(out.read_text())
    assert seen["enabled"] is True and seen["frozen"] > 100_000, seen
