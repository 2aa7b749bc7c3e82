"""A forward a library runs from the script's line, under gradients, because it reads the
graph (Note [A library's own forward from the script's line], trace/doctor_unused.py): the
finding names the library's line and does not tell the script to turn gradients off."""

from __future__ import annotations

import os
import sysconfig

import torch
from torch import nn

from memledger.doctor.records import Run
from memledger.doctor.unused import unused_graph
from memledger.trace.doctor_unused import UnusedGraphWatch

# a stand-in for torch-pruning's `DependencyGraph.build_dependency`: a module of an
# installed package (its file under site-packages) that runs the model and keeps its graph
_LIB = os.path.join(sysconfig.get_paths()["purelib"], "graphlib_stub", "trace.py")
_SRC = """
def build(model, x):
    out = model(x)
    return [out.grad_fn]   # what a tracer keeps while it walks the graph
"""


def _library_build():
    ns: dict = {}
    exec(compile(_SRC, _LIB, "exec"), ns)
    return ns["build"]


def _records_of(script) -> list[dict]:
    """The watch's records of `script`, a function of this file called by this file (its
    caller is no library: pytest's frames would read as one calling the script)."""
    records: list[dict] = []
    with UnusedGraphWatch(records, step=lambda: 1):
        script()
    return records


def test_a_library_forward_from_the_scripts_line_names_the_library():
    build = _library_build()
    model = nn.Linear(4, 4)

    def script():
        kept = build(model, torch.randn(2, 4, requires_grad=True))   # the script's line
        del kept   # the graph dies: no backward ran it

    records = _records_of(script)
    [rec] = records
    assert rec["ran_by"] == "graphlib_stub/trace.py:3 (build)"
    assert rec["via"] == ""
    run = Run.of(records)
    [f] = unused_graph(run)
    assert f.evidence["ran_by"] == "graphlib_stub/trace.py:3 (build)"
    assert ", run by graphlib_stub/trace.py:3 (build) from this line:" in f.message
    assert "let go of what it returned once done" in f.message
    # the old advice, which would stop the library from reading the graph it needs
    assert "run it under torch.no_grad() or torch.inference_mode()" not in f.message


def test_the_scripts_own_forward_keeps_its_advice():
    model = nn.Linear(4, 4)

    def script():
        out = model(torch.randn(2, 4, requires_grad=True))
        del out

    records = _records_of(script)
    [rec] = records
    assert rec["ran_by"] == ""
    [f] = unused_graph(Run.of(records))
    assert "ran_by" not in f.evidence
    assert f.message.endswith("(an evaluation or logging forward?); run it under "
                              "torch.no_grad() or torch.inference_mode()")


# a stand-in for pykan's MultKAN: `fit` runs a test loss through `self.forward(x)` (a
# method call, not a module call) under gradients, and no backward uses it
_FIT_LIB = os.path.join(sysconfig.get_paths()["purelib"], "kanstub", "model.py")
_FIT_SRC = """
from torch import nn
class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layer = nn.Linear(4, 4)
    def forward(self, x):
        return self.layer(x)
    def fit(self, x):
        return self.forward(x).sum().item()
"""


def test_a_forward_called_as_a_method_names_the_line_that_called_it():
    """Note [A forward called as a method] (trace/where.py): the inner module's call is
    top-level; the library line named is `fit`'s, not the forward's own."""
    ns: dict = {}
    exec(compile(_FIT_SRC, _FIT_LIB, "exec"), ns)
    model = ns["Net"]()
    x = torch.randn(2, 4)

    def script():
        model.fit(x)   # the script's line

    [rec] = _records_of(script)
    assert (rec["cls"], rec["ran_by"]) == ("Linear", "kanstub/model.py:10 (fit)")

    def direct():
        model.forward(x).sum().item()   # the script's own method call: its own advice

    [rec] = _records_of(direct)
    assert rec["ran_by"] == ""


def test_a_line_that_also_trains_is_not_told_to_turn_gradients_off():
    """Note [A line that also trains] (doctor/unused.py): pykan's `model.fit(...)` runs the
    training step and, beside it, forwards of its own no backward uses. The advice was
    "run the line under torch.no_grad()", which would stop the training; where a backward
    ran from the finding's line it names the library's setting instead."""
    ns: dict = {}
    exec(compile(_FIT_SRC, _FIT_LIB, "exec"), ns)
    model = ns["Net"]()
    x = torch.randn(2, 4)

    def script():
        model.fit(x)   # the script's line, which (below) also trains

    [rec] = _records_of(script)
    backward = {"k": "backward", "n": 1, "window": 1, "file": rec["file"],
                "line": rec["line"], "losses": [], "params": 2}
    [f] = unused_graph(Run.of([rec, backward]))
    assert f.message.endswith(
        "(the library's own forward: a test loss, a log, a grid update?); this line also "
        "trains (a backward runs from it), so torch.no_grad() around it would stop the "
        "training: turn that forward off by the library's setting where it has one, or "
        "tell its authors"), f.message
    # a backward from another line leaves the old advice
    [f] = unused_graph(Run.of([rec, {**backward, "line": rec["line"] + 1}]))
    assert "where it needs no graph, run the line under torch.no_grad()" in f.message
