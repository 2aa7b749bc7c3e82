"""BoTorch (tests/clients/train_botorch.py): a `SingleTaskGP` in float64 fitted by the
tutorial's Adam loop and by botorch's own `torch_minimize`. The acquisition modes
(`optimize_acqf`) take 30 s or more traced in-process: their mechanism (a dropped module's
label, Note [A label the model's child takes]) is pinned in
tests/integration/test_model_methods.py. Skipped without botorch.

Imported before the module's first test (`_imported`), before any pass: gpytorch's import
makes two 4 B tensors, and botorch's `qLogNoisyExpectedImprovement` (loaded on first use of
`botorch.acquisition`'s name) one, which in one process only the first pass would count; a
fresh process per pass (`memledger trace`) counts them in each."""

from __future__ import annotations

import pytest

from tests.clients.harness import ledger_pass, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("botorch")


@pytest.fixture(scope="module", autouse=True)
def _imported():
    """Imported before any pass (the module's docstring says why); in a fixture, not at the
    module's top (Note [Tier modules import nothing at collection], harness.py)."""
    from botorch.acquisition import qLogNoisyExpectedImprovement  # noqa: F401


def test_a_gp_fitted_by_adam_every_byte_and_its_state_by_formula():
    """The tutorial's loop on a model whose constructor calls its input transform before
    `nn.Module.__init__` ran: every trace of a botorch model ended in exit 70
    (AttributeError: 'SingleTaskGP' object has no attribute '_modules', Note [A model
    called through its methods], trace/roots.py). Now every byte: parameters 40 B
    (noise 8, constant 8, three lengthscales 24, float64), Adam's state 2 x 40 + 3 step
    counters x 4 = 92 B.

    The GP's own call is gpytorch's `Module.__call__`, which no torch module hook sees, and
    the modules its forward calls hold no parameters: the model was the marginal likelihood
    (found through the noise constraint's `Softplus`), no step had a forward phase, the
    training inputs read `other`, and predict refused `checkpoint:model.input_transform`
    ("the modules the traced forward called are (none recorded)") while measure ran it.
    Now the GP is the model, found through its input transform's call (Note [A part
    labelled before its model was called], trace/roots.py), its first top-level call in a
    step begins the forward (Note [A model whose own call no hook sees],
    trace/collector.py): the inputs (16x3 float64, 384 B, the standardised targets 128 B,
    four 4 B constants the loss reads) are `input`, and
    `checkpoint:input_transform` is predicted = measured. A policy on a kernel is refused
    by predict in words that fit (Note [A class with a call of its own],
    replay/policies.py): it said to call the module itself."""
    run = run_client("train_botorch.py", ["--mode", "adam", "--n", "16"],
                     ["checkpoint:covar_module", "checkpoint:input_transform"])
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    resident = run.summary.resident
    assert (resident["parameter"], resident["optimizer_state"], resident["gradient"],
            resident["input"]) == (40, 92, 40, 384 + 128 + 4 * 4)
    assert run.summary.by_phase_peak["forward"] > 0
    p = run.policies["checkpoint:covar_module"]
    assert p.predicted is None and "its class (RBFKernel) has a `__call__` of its own" \
        in p.predict_refusal, p
    p = run.policies["checkpoint:input_transform"]
    assert p.predicted == p.measured, p


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


def test_a_gp_fitted_by_scipy_traced_whole_finds_its_model():
    """`fit_gpytorch_mll` (scipy's L-BFGS-B, no torch optimizer step) traced as one step
    (`--steps-by whole`, the ledger pass alone): the GP was never found (its call is
    gpytorch's, its input transform a top-level module since the constructor), so its
    parameters and their gradients read `other` and `temporary`: 0 B of `parameter` and
    `gradient`. Now 40 B each, and the training data `input`."""
    led = ledger_pass("train_botorch.py", ["--mode", "scipy", "--n", "16", "--steps", "3"],
                      steps=1, steps_by="whole")
    res = led.summary().resident
    assert (res["parameter"], res["gradient"], res["input"]) == (40, 40, 384 + 128 + 16)
