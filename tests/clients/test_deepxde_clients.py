"""DeepXDE (tests/clients/train_deepxde.py): physics-informed networks on its pytorch backend,
the PDE's residual through `dde.grad.hessian` / `dde.grad.jacobian` (`autograd.grad(...,
create_graph=True)` taken twice for u_xx, then the residual's backward through both graphs),
`dde.data.PDE`, `dde.nn.FNN` (`linears.*`), `model.compile` / `model.train`, Adam and the
L-BFGS stage (`torch.optim.LBFGS`, whose `step(closure)` evaluates the loss several times).

Measured (`tests/clients/harness.py run_client`, the helper hunt42b, 2026-12-06, torch
2.13.0 CPU, DeepXDE 1.15.0):
- `--pde poisson` (Adam, 1 step; 20 training points, FNN 1-16-16-1): the ledger equal to the
  allocator, 28,448 B; `offload:linears.0` 28,448 B predicted and measured;
  `selective:linears.*` refused by both, naming linears.1 (predict named linears.2 before
  Note [The region a second pass meets first], replay/engine.py). `checkpoint:linears.1`,
  `offload:linears.*` and the like are refused by predict alone (two graph-building passes
  read their saves: NotPredicted, docs/accuracy.md).
- `--optimizer lbfgs --lbfgs-iters 8 --lbfgs-per-step 4` (2 `LBFGS.step` calls, 4 iterations
  each, 11 closure calls): 47,869 B both; its history and direction 11,596 B of optimizer
  state at the peak; `offload:linears.0` 47,869 B both sides. The doctor finds nothing on
  Adam, L-BFGS, or Adam then L-BFGS.
- `checkpoint:linears.0` (the input layer, re-run by measure in each pass that reads its
  weight's save) was predicted 112 B under measured on Poisson (33,504 against 33,616 B),
  1,396 B under with L-BFGS; now refused by predict alone (Note [A save a later pass reads
  again], replay/engine.py), measured 33,616 B.
"""

import contextlib
import importlib.util
import io

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("deepxde") is None:
    pytest.skip("DeepXDE is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients   # the same bytes at 1 and 2 intra-op threads


@pytest.fixture(scope="module", autouse=True)
def _deepxde_imported():
    """DeepXDE imported before the first pass (with DDE_BACKEND=pytorch, put back after), as
    the script imports it: its import picks a backend and reads its config once."""
    with contextlib.redirect_stderr(io.StringIO()):
        import tests.clients.train_deepxde  # noqa: F401


def test_a_pinn_selective_refusal_names_the_region_both_sides_meet():
    """Poisson's u_xx: `dde.grad.hessian` takes `autograd.grad(create_graph=True)` twice,
    then the residual's backward runs back through both graphs and reaches every layer's
    saves a second time. torch's selective checkpoint re-runs a region once, so both sides
    refuse `selective:linears.*`; measure meets linears.1 first (its saved input, the first
    tanh's output, is read again before linears.2's), and predict named linears.2 (the last
    call, as a plain second backward meets it). Parameters: 4 * (2 * 16 + 17 * 16 + 17) =
    1,284 B; Adam's state is made after the peak. And `checkpoint:linears.0` is refused by
    predict (measured 33,616 B), no longer predicted 112 B under."""
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_deepxde.py", ["--pde", "poisson"],
                         ["selective:linears.*", "offload:linears.0", "checkpoint:linears.0"],
                         steps=1)
    assert run.ledger_peak == run.allocator_peak == 28_448
    at = run.summary.at_peak
    assert (at["parameter"], at["optimizer_state"]) == (1_284, 0)
    sel = run.policies["selective:linears.*"]
    assert sel.predicted is None and sel.measured is None
    assert sel.predict_refusal == sel.measure_refusal
    assert sel.predict_refusal.startswith(
        "memledger: selective:linears.* would re-run linears.1 for a second backward pass")
    off = run.policies["offload:linears.0"]
    assert off.predicted == off.measured == 28_448
    # Note [A save a later pass reads again]: the first layer drops nothing (its input is
    # numpy's memory, its output the tanh's save), but the u_xx passes read its weight's
    # save again, and measure's checkpoint re-runs it in each: 33,504 B was predicted
    first = run.policies["checkpoint:linears.0"]
    assert first.predicted is None and first.measured == 33_616
    assert first.predict_refusal.startswith(
        "memledger: checkpoint:linears.0 would re-run linears.0 in each of two backward "
        "passes")


def test_lbfgs_steps_with_several_closures_are_traced_and_doctored_clean():
    """DeepXDE's L-BFGS stage: `model.compile("L-BFGS")` makes a `torch.optim.LBFGS` whose
    `step(closure)` runs up to 4 iterations (6 and 5 closure calls here); each closure is
    DeepXDE's forward, PDE residual and backward. Two steps traced (11 closures), the
    ledger equal to the allocator, and the doctor finds nothing, with Adam before it too."""
    argv = ["--optimizer", "lbfgs", "--lbfgs-iters", "8", "--lbfgs-per-step", "4"]
    with contextlib.redirect_stdout(io.StringIO()):
        run = run_client("train_deepxde.py", argv, ["offload:linears.0"], steps=2)
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == run.allocator_peak == 47_869
    at = run.summary.at_peak
    assert (at["parameter"], at["optimizer_state"]) == (1_284, 11_596)
    off = run.policies["offload:linears.0"]
    assert off.predicted == off.measured == 47_869
    with contextlib.redirect_stdout(io.StringIO()):
        assert_one_doctor_error("train_deepxde.py", argv, 2, None, "")
        assert_one_doctor_error("train_deepxde.py", ["--optimizer", "adam+lbfgs", "--steps",
                                                     "1", *argv[2:]], 2, None, "")
