"""torchcde (tests/clients/train_torchcde.py): a neural CDE on irregular time series, as
torchcde's README and examples train one: coefficients once before the loop (Hermite cubic
with backward differences) or from each raw batch inside `forward` (linear), `CubicSpline`
/ `LinearInterpolation`, a vector field `func` returning a (hidden, input) matrix per
sample, `cdeint` with rk4 (36 calls of `func` a step) or `adjoint=True`, a readout and a
cross-entropy. Skipped without torchcde.

Measured once (2026-12-06, hunt42c, `memledger trace`/`predict`/`measure` in fresh
processes, `--steps 2`): default loop, ledger = allocator = 169,164 B in-process (fresh
processes add the 5,256 B of float64 Butcher tableaus torchdiffeq and torchsde make at
import); `checkpoint:func` 267,900 B (each call keeps a 5,056 B CPU generator state until its
backward, 35 of them at the peak: more than the activations it drops), `selective:func` 346,236 B, `offload:func`
81,868 B, all exact. `--method dopri5` (cdeint's default solver) reads 296,264 B ledger =
allocator in fresh processes, `checkpoint:func` 610,816 B and `offload:func` 200,212 B
predicted = measured; in one process the harness finds dopri5's tableau made before the
pass and counts it at its first use (384 B over the allocator, the harness's, not the
CLI's). `--adjoint`: `offload:readout` was predicted 512 B under measured (154,432 against
154,944 B), Note [A backward pass run inside a node] (memledger/trace/nested_backward.py).
"""

from __future__ import annotations

import importlib.util

import pytest

if importlib.util.find_spec("torchcde") is None:
    pytest.skip("torchcde is not installed", allow_module_level=True)

from tests.clients.harness import assert_one_doctor_error, run_client  # noqa: E402

pytestmark = pytest.mark.clients


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """torchcde imports torchdiffeq and torchsde, whose solvers' Butcher tableaus are
    float64 tensors made at import (98 storages, 5,256 B): imported inside the first pass
    only, the ledger pass saw them and the allocator pass after it did not."""
    import torchcde  # noqa: F401


def test_a_neural_cde_with_coefficients_made_once():
    """ledger = allocator, and every policy on the vector field (called by the solver 36
    times a step) and the readout predicted to the byte."""
    run = run_client("train_torchcde.py", [], [
        "checkpoint:func", "selective:func+offload:readout", "offload:func"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 155_668
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:func": (254_404, 254_404),
                   "selective:func+offload:readout": (332_740, 332_740),
                   "offload:func": (72_960, 72_960)}


def test_the_adjoint_node_holds_the_solution_through_its_backward_solve():
    """`cdeint(..., adjoint=True)`: the adjoint's Function saves the solution it returns
    and its backward unpacks it, then solves the adjoint ODE with a nested
    `torch.autograd.grad` per stage, holding the solution to its end. The readout saves a
    view of that solution too; `offload:readout` let the (2, 8, 8) fp32 solution go at the
    first nested pass: predicted 135,680 B against 136,192 B measured before (Note [A
    backward pass run inside a node], trace/nested_backward.py). The vector field runs
    without a graph in forward and inside backward: `checkpoint:func` changes nothing."""
    run = run_client("train_torchcde.py", ["--adjoint"],
                     ["offload:readout", "checkpoint:func"], steps=1)
    assert run.ledger_peak == run.allocator_peak == 136_192, _small_at_peak(run)
    for text, p in run.policies.items():
        assert p.predicted == p.measured == 136_192, (text, p)


def _small_at_peak(run) -> str:
    """The storages of at most 64 B live at the ledger's peak, for the failure's message.
    In a work-stealing suite run this test read 136,200 B (ledger = allocator): an earlier
    test in its worker had left a frame evaluator installed, and the backward's 8 B `flip`
    lived through the adjoint solve (Note [A frame evaluator left installed],
    tests/conftest.py). Should another byte difference come, the message names its op,
    dtype and shape."""
    led = run.ledger
    live = led.live_at(led.peak().event)
    small = live[live["bytes"] <= 64]
    return f"ledger {run.ledger_peak:,} B, allocator {run.allocator_peak:,} B; small at the " \
        "peak: " + "; ".join(f"{r.bytes} B {r.dtype} [{r.shape}] {r.op} {r.phase} {r.category}"
                              f"{' external' if r.external else ''}"
                              for r in small.itertuples())


def test_the_doctor_finds_nothing_in_the_readme_loop():
    """The README's loop (`loss.backward(); optimizer.step(); optimizer.zero_grad()`), the
    coefficients made inside `forward` from each raw batch, linear interpolation."""
    assert_one_doctor_error("train_torchcde.py", ["--interp", "linear", "--coeffs", "inside"],
                            2, None, "")
