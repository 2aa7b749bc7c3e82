"""torchopt (tests/clients/train_torchopt.py): MAML with differentiable inner optimizers,
and torchopt's drop-in optimizer that is no torch.optim.Optimizer.

Measured once (`tests/clients/harness.py run_client`, the helper hunt38c, 2026-12-05):
`--mode maml` (2 tasks of 2 MetaSGD steps, 2 steps) reads the ledger equal to the
allocator, 506,532 B; `checkpoint:blocks.*` 562,212 B, `offload:blocks.*` 553,780 B,
`checkpoint:blocks.1` 525,092 B and `checkpoint:head` 516,648 B predicted and measured;
`--mode maml-adam` (MetaAdam's differentiable moments): 1,350,648 B (4 B of kernel
scratch under the allocator), `checkpoint:blocks.*` 1,405,564 B and `offload:blocks.*`
1,416,188 B both sides; selective of the blocks is refused by both (the inner
`autograd.grad(create_graph=True)` and the outer backward read each block twice).
"""

import contextlib
import io
import json
import warnings

import pytest

from tests.clients.harness import HERE, imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("torchopt")
_imported = imported_first("torchopt")


def test_maml_fast_weights_under_checkpoint_and_offload_are_predicted_as_measured():
    """MetaSGD writes each inner step's new weights into the modules' `_parameters` as
    non-leaf tensors (`w1 = w0 - lr * g0`) and lets go of them when the next step (or
    `recover_state_dict`) replaces them; the outer backward reads their saves again.

    - `checkpoint:blocks.1`: measure's checkpoint keeps what the region's `_parameters` held
      and puts it back for the re-run (Note [Parameters handed in], measure/apply.py), so
      its frame holds `w1`'s bias (256 B), which autograd never saved; the replay let it go
      where the script did: 372,720 B predicted against 372,976 B measured (Note [Weights
      put in a module's parameters], trace/collector.py).
    - `offload:blocks.1.fc`: `w1` was written `released` -1 (the module still held it as the
      inner `autograd.grad` began) and read as held to its baseline free, beside its
      read-back copy: 378,992 B predicted against 362,608 B measured, one (64, 64) fp32
      weight over (Note [Let go of between two backward passes]).

    The fast weights are activations (saved for the outer backward), never parameters:
    the parameters at the peak are the 12,673 meta-weights, 50,692 B. And tracing reads no
    `.grad` of them (torch warned "The .grad attribute of a Tensor that is not a leaf
    Tensor is being accessed" in the script's output)."""
    with warnings.catch_warnings(record=True) as caught, \
            contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("always")
        run = run_client("train_torchopt.py", ["--mode", "maml", "--inner", "2", "--tasks", "1"],
                         ["checkpoint:blocks.1", "offload:blocks.1.fc"], steps=1)
    assert [str(w.message) for w in caught if "not a leaf" in str(w.message)] == []
    assert run.ledger_peak == run.allocator_peak == 354_416
    assert run.summary.steps_traced == 1
    # 4 * (64 + 64 + 3 * (64 * 64 + 64) + 64 + 1) = 50,692 B of meta-weights
    assert run.summary.at_peak["parameter"] == 50_692
    ckpt, off = run.policies["checkpoint:blocks.1"], run.policies["offload:blocks.1.fc"]
    assert (ckpt.predicted, ckpt.measured) == (372_976, 372_976)
    assert (off.predicted, off.measured) == (362_608, 362_608)


def test_an_optimizer_that_is_no_torch_optimizer_is_named_when_no_step_is_seen(tmp_path):
    """`torchopt.Adam(net.parameters())` has `step()` and `zero_grad()` but derives from no
    `torch.optim.Optimizer`, so torch's step hooks never fire: `trace` said "the script ran
    no optimizer step ... a hand-written update" and `doctor` "call optimizer.step() in the
    script", to a script that calls it. The ledger pass now names the class of such an
    object alive at the second backward's end with no step seen, and `trace` says what to
    do (Note [An optimizer torch's hooks do not see], trace/optimizer_like.py)."""
    from memledger.trace import worker as trace_worker
    from memledger.trace.optimizer_like import no_step_hint

    status = tmp_path / "status.json"
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        trace_worker.main(["ledger", "--out", str(tmp_path / "run.ledger"), "--status",
                           str(status), "--steps", "1", str(HERE / "train_torchopt.py"), "--",
                           "--mode", "adam", "--steps", "2"])
    res = json.loads(status.read_text())
    assert res["steps"] == 0
    assert res["optimizer_like"] == "torchopt.optim.adam.Adam"
    assert no_step_hint(res["optimizer_like"]) == (
        "; a torchopt.optim.adam.Adam is alive, which has step() and zero_grad() but is no "
        "torch.optim.Optimizer, whose step hooks memledger reads: count steps by forward "
        "passes (--steps-by forward) or trace the whole script (--steps-by whole)")
