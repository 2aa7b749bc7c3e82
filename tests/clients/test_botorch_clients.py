"""BoTorch (tests/clients/train_botorch.py): a `SingleTaskGP` in float64 fitted by the
tutorial's Adam loop and by botorch's own `torch_minimize`. The acquisition modes
(`optimize_acqf`) take 30 s or more traced in-process: their mechanism (a dropped module's
label, Note [A label the model's child takes]) is pinned in
tests/integration/test_model_methods.py. Skipped without botorch.

Imported here, before any pass: gpytorch's import makes two 4 B tensors, and botorch's
`qLogNoisyExpectedImprovement` (loaded on first use of `botorch.acquisition`'s name) one,
which in one process only the first pass would count; a fresh process per pass
(`memledger trace`) counts them in each."""

from __future__ import annotations

import pytest

pytest.importorskip("botorch")
from botorch.acquisition import qLogNoisyExpectedImprovement  # noqa: E402,F401  (see above)

from tests.clients.harness import run_client  # noqa: E402

pytestmark = pytest.mark.clients

THROUGH = "never called as a module: the code runs its work through another of its methods"


def test_a_gp_fitted_by_adam_every_byte_and_its_state_by_formula():
    """The tutorial's loop on a model whose constructor calls its input transform before
    `nn.Module.__init__` ran: every trace of a botorch model ended in exit 70
    (AttributeError: 'SingleTaskGP' object has no attribute '_modules', Note [A model
    called through its methods], trace/roots.py). Now every byte: parameters 40 B
    (noise 8, constant 8, three lengthscales 24, float64), Adam's state 2 x 40 + 3 step
    counters x 4 = 92 B. The GP's own call is gpytorch's (`Module.__call__` runs `forward`
    with no torch module hook), so predict refuses a policy on it in one line."""
    run = run_client("train_botorch.py", ["--mode", "adam", "--n", "16"], ["checkpoint:model"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    resident = run.summary.resident
    assert (resident["parameter"], resident["optimizer_state"], resident["gradient"]) == \
        (40, 92, 40)
    p = run.policies["checkpoint:model"]
    assert p.predicted is None and THROUGH in p.predict_refusal, p


def test_botorchs_own_torch_loop_counts_its_steps():
    """`fit_gpytorch_mll(..., optimizer=fit_gpytorch_mll_torch)`: `torch_minimize` steps
    Adam after a closure that zeroes the gradients in place (`zero_grad_ctx`), so they stay
    resident between steps; two steps traced, every byte. The fit runs inside botorch's
    `module_rollback_ctx`, whose `finally` copies parameters as the stop unwinds: the trace
    worker took that for a swallowed stop and ended the process, this pytest process
    included (Note [Cleanup while the stop unwinds], trace/collector.py)."""
    run = run_client("train_botorch.py", ["--mode", "torch", "--n", "16", "--steps", "4"], [])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.summary.at_peak["gradient"] == 40

