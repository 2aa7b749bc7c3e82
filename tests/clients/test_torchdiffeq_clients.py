"""Neural ODEs on torchdiffeq (tests/clients/train_odeint.py): `odeint` calls the dynamics
module `func` 8 times a step (rk4, 2 steps); `odeint_adjoint`'s backward solves an ODE
and calls `func` again inside a custom Function's backward. Skipped without torchdiffeq."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("torchdiffeq")
_imported = imported_first("torchdiffeq")


def test_a_module_the_solver_calls_eight_times_a_step():
    """ledger = allocator, and every policy exact: `checkpoint:func` (each of the 8 calls
    its own region), `selective:func`, and `offload:func`, which was predicted 24,260 B
    over its measurement before (dopri5 40,960 B): torchdiffeq's `t.to(y.abs().dtype)`
    saves the region's input outside it, in a node that dies at once (Note [A save
    autograd let go of unread], trace/collector.py)."""
    run = run_client("train_odeint.py", ["--case", "rk4", "--steps", "4"], [
        "checkpoint:func", "selective:func", "offload:func"])
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)


def test_adjoint_calls_in_backward_take_no_policy():
    """The adjoint's forward solve runs without a graph and its backward calls `func`
    under `enable_grad` inside the Function's backward, where no policy acts (Note [A region
    called inside backward], measure/apply.py): every policy predicts the baseline, and
    measures it."""
    run = run_client("train_odeint.py", ["--case", "adjoint", "--steps", "4"],
                     ["offload:func"])
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured == run.allocator_peak, (text, p)
