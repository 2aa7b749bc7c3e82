"""Note [Policies inside compiled code] (memledger/trace/compiled.py): predict refuses, and
compare measures without a prediction, a policy on a region inside code a real backend
compiled; Note [A step that compiled]: a timed step that compiled is not kept."""

import pytest
import torch

from memledger.errors import NotPredicted, PolicyRefused
from memledger.ledger.model import Ledger
from memledger.ledger.schema import SCHEMA
from memledger.replay.compiled import (compiled_elsewhere_line, compiled_regions,
                                      refuse_compiled_regions)
from memledger.trace.compiled import UNKNOWN_BACKEND, compiled_backend

COMPILED = [("blocks.1", "aot_eager"), ("head", "inductor")]


def test_a_region_that_is_holds_or_sits_inside_compiled_code_is_not_predicted():
    with pytest.raises(NotPredicted, match=r"^memledger: checkpoint:blocks\.\*: blocks\.1 is "
                       r"torch\.compile'd \(backend 'aot_eager'\): in a compiled graph"):
        refuse_compiled_regions("checkpoint:blocks.*", ["blocks.0", "blocks.1"], COMPILED)
    with pytest.raises(NotPredicted, match=r": blocks holds blocks\.1, torch\.compile'd"):
        refuse_compiled_regions("offload:blocks", ["blocks"], COMPILED)
    with pytest.raises(NotPredicted, match=r": blocks\.1\.fc1 runs inside blocks\.1, "):
        refuse_compiled_regions("selective:blocks.1.fc1", ["blocks.1.fc1"], COMPILED)
    with pytest.raises(NotPredicted, match=r": the model holds blocks\.1"):
        refuse_compiled_regions("checkpoint:**", [""], COMPILED)
    with pytest.raises(NotPredicted, match=r": blocks\.0 runs inside the model, torch\.co"):
        refuse_compiled_regions("checkpoint:blocks.0", ["blocks.0"], [("", "inductor")])
    assert issubclass(NotPredicted, PolicyRefused)   # measure and compare still run it


def test_regions_beside_compiled_code_are_predicted():
    # blocks.1 is a prefix of blocks.10's path, not its parent
    refuse_compiled_regions("checkpoint:blocks.*", ["blocks.0", "blocks.10", "out"], COMPILED)
    refuse_compiled_regions("checkpoint:blocks.1", ["blocks.1"], [])


def _ledger(*extra: dict, measured: bool = True) -> Ledger:
    records = [{"k": "header", "schema": SCHEMA}, {"k": "phase", "ev": 0, "ph": "setup",
                                                   "step": 1},
               *extra, {"k": "end", "ev": 1, "status": "ok"}]
    if measured:
        records.append({"k": "measured", "source": "cpu-profiler", "device": "cpu",
                        "peak_bytes": 0})
    return Ledger.from_records(records)


def test_compiled_regions_need_a_real_backend_and_compiled_frames():
    aot = {"k": "compiled", "mod": "OptimizedModule", "path": "blocks.1",
           "backend": "aot_eager"}
    eager = {"k": "compiled", "mod": "OptimizedModule", "path": "blocks.2", "backend": "eager"}
    frames = {"k": "compiles", "frames": 11}
    assert compiled_regions(_ledger(aot, eager, frames)) == (("blocks.1", "aot_eager"),)
    # the allocator pass ran the compiled code and compiled nothing (`module.compile()` of
    # a torch module: its frames are in Dynamo's skip list): the wrappers act as eager
    assert compiled_regions(_ledger(aot, eager)) == ()
    # no allocator pass to say (the Python API): refused
    assert compiled_regions(_ledger(aot, measured=False)) == (("blocks.1", "aot_eager"),)
    # an older ledger's record has neither path nor backend
    assert compiled_regions(_ledger({"k": "compiled", "mod": "OptimizedModule"}, frames)) == ()


def test_the_backend_is_read_off_the_compiled_module():
    def my_backend(gm, example_inputs):
        return gm.forward

    assert compiled_backend(torch.nn.Linear(2, 2)) is None
    for backend, name in (("eager", "eager"), ("aot_eager", "aot_eager"),
                          ("inductor", "inductor"), (my_backend, "my_backend")):
        lin = torch.nn.Linear(2, 2)
        assert compiled_backend(torch.compile(lin, backend=backend)) == name
        lin.compile(backend=backend)
        assert compiled_backend(lin) == name
    assert UNKNOWN_BACKEND == "unknown"


def test_a_timed_step_that_compiled_is_not_kept():
    """The residual MLP's compiled block: the one timed step compiled it (602 ms of forward
    where a call takes 0.2 ms), and checkpointing it was priced at +394 ms per step."""
    from memledger.trace.timing import StepTimers

    t = StepTimers(module_steps=4)
    try:
        t.step_faults, t.step_compiles = [0, 0, 0, 0], [11, 0, 2, 0]
        t.step_ns = [602_000_000, 40_000_000, 41_000_000, 40_000_000]
        assert t.settled() == [1, 3]
    finally:
        t.close()


def test_compiled_code_outside_any_module_gets_a_line():
    """A `torch.compile`d function (a whole step) names no module and no backend: predict
    cannot refuse its policies, so it says the predictions may not hold."""
    frames = {"k": "compiles", "frames": 72}
    assert "outside any compiled module" in compiled_elsewhere_line(_ledger(frames))
    assert compiled_elsewhere_line(_ledger()) == ""
    module = {"k": "compiled", "mod": "OptimizedModule", "path": "", "backend": "inductor"}
    assert compiled_elsewhere_line(_ledger(module, frames)) == ""


def test_probe_regions_of_a_compiled_model_are_its_own_children():
    """torch.compile's wrapper holds the model as `_orig_mod`: the probes looked for that
    name among the model's modules and failed (KeyError: '_orig_mod')."""
    from memledger.trace.timing import probe_regions

    from collections import OrderedDict

    model = torch.nn.Sequential(OrderedDict(fc1=torch.nn.Linear(2, 3), act=torch.nn.ReLU(),
                                            fc2=torch.nn.Linear(3, 2)))
    assert probe_regions(torch.compile(model, backend="eager")) == probe_regions(model) == \
        ["fc1", "fc2"]


def test_collectors_run_compiled_code_eager_and_put_the_stance_back_in_any_order():
    """Note [Compiled code runs eager under the collector]: a function compiled with
    fullgraph=True runs eagerly inside a collector (it raised "torch.compile with
    fullgraph=True found no compiled frames"), and the last collector to end puts back
    the stance from before the first, in whatever order two threads' blocks end."""
    import torch._dynamo.eval_frame as ef

    from memledger.ledger.writer import MemorySink
    from memledger.trace.collector import Collector
    from memledger.trace.compiled import eager_stance

    if not hasattr(torch._dynamo, "set_stance"):
        pytest.skip("torch.compile stances need torch >= 2.6")
    f = torch.compile(lambda x: (x * 2).sin(), fullgraph=True, backend="eager")
    before = ef._stance.stance
    with Collector(MemorySink()):
        assert ef._stance.stance == "force_eager"
        assert torch.equal(f(torch.ones(3)), torch.ones(3).mul(2).sin())
    assert ef._stance.stance == before
    eager_stance(True)                     # thread A's block begins
    eager_stance(True)                     # thread B's
    eager_stance(False)                    # A's ends first: B still traces, eagerly
    assert ef._stance.stance == "force_eager"
    eager_stance(False)
    assert ef._stance.stance == before


def test_dynamo_refusing_one_graph_says_what_to_do(tmp_path):
    """Note [A policy inside one graph] (trace/script.py): a policy's wrappers inside a model
    compiled with fullgraph=True cannot be traced into one graph; the run's reason says so
    beside Dynamo's own words. The script here reads the saved-tensor hooks, as the
    nesting guard does, inside a fullgraph function.
    Run in a forked child: the failed fullgraph compile leaves Dynamo's frame evaluator
    installed for good, and every later in-process trace of this pytest process kept call
    arguments alive longer (Note [A frame evaluator left installed], tests/conftest.py)."""
    from memledger.trace.script import run_and_classify

    script = tmp_path / "one_graph.py"
    script.write_text(
        "import torch\n"
        "f = torch.compile(lambda x: (torch._C._autograd._top_saved_tensors_default_hooks("
        "False), x + 1)[1], fullgraph=True, backend='eager')\n"
        "f(torch.ones(2))\n")
    reason = _in_a_child(lambda: run_and_classify(script, []).reason)
    assert reason.startswith("script raised Unsupported: ")
    assert reason.endswith("(torch.compile with fullgraph=True could not put this run's "
                               "code in one graph: a policy's wrappers around compiled "
                               "modules cannot be; measure the policy with the model "
                               "compiled without fullgraph=True)")



def _in_a_child(fn) -> str:
    """`fn()` (a str) computed in a forked child, so that what it leaves in the interpreter
    stays there."""
    import os

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            os.write(write, fn().encode())
            code = 0
        finally:
            os._exit(code)
    os.close(write)
    with os.fdopen(read, "rb") as f:
        out = f.read().decode()
    _, status = os.waitpid(pid, 0)
    assert os.WEXITSTATUS(status) == 0, "the child failed"
    return out
