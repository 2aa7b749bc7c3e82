"""A model called with gradients between steps through a module outside it
(tests/clients/train_grad_in_eval.py --through): an evaluation under `torch.no_grad()`
that turns gradients back on and calls the model from a plain function inside a
parameterless module (torchdiffeq's `_PerturbFunc`, as flow_matching's
`ODESolver.compute_likelihood` runs the velocity model), then takes `autograd.grad` of a
Hutchinson estimate of its divergence. Those calls read phase "other", and the replay left
every policy off them while measure wraps them: Note [A call with gradients between
steps] (memledger/replay/prepared.py)."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_call_with_gradients_between_steps_is_the_policies_and_no_step_backward():
    """Before, each policy was predicted at the baseline (60,556 B: the evaluation's
    graph, 32 rows through two blocks) against 62,476 B measured under `checkpoint:*`,
    52,364 B under `offload:0` and 67,660 B under `selective:1`; now as measured."""
    pols = {"checkpoint:*": 62_476, "offload:0": 52_364, "selective:1": 67_660}
    run = run_client("train_grad_in_eval.py", ["--through", "--batch", "32"], list(pols),
                     steps=2)
    assert run.ledger_peak == run.allocator_peak == 60_556
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    # Note [A backward pass outside the step] (ledger/model.py): the peak is the
    # evaluation's `autograd.grad`, begun between steps with no optimizer step after it.
    # `show` read "at step 2 · backward" and `by_phase_peak["backward"]` 60,556 B, the
    # step's own backward being 44,936 B; now its phase is the one it began in, said so
    s = run.summary
    assert (s.peak.step, s.peak.phase, s.peak.op, s.peak.backward_outside_step) == \
        (2, "other", "tanh_backward.default", True)
    assert (s.by_phase_peak["backward"], s.by_phase_peak["other"]) == (44_936, 60_556)
    from memledger.report.terminal import _phase
    assert _phase(s.peak) == ("other (a backward pass between steps that no optimizer step "
                              "follows, not the step's backward)")
