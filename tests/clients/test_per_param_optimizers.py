"""One optimizer per parameter, stepped in an order that changes run to run, as pyro's
`SVI.step` steps them (tests/clients/train_per_param_opt.py, torch only)."""

from __future__ import annotations

import pytest

from tests.clients.harness import HERE, run_client

pytestmark = pytest.mark.clients


def test_gates_name_a_guides_parameters_whatever_order_its_optimizers_step():
    """Note [Parameters the model does not hold] (verify/capture.py): the guide's scale and
    shift were named by their optimizer's place in the order of first steps; pyro steps
    them in a set's order, and `compare -p selective:layers.*` on train_pyro.py --case det
    was rejected with "param_groups[0][0] has no gradient at step 0". Here the baseline
    steps them in one order and the policy's run in the other: the gates pass, bitwise."""
    from memledger.verify.gates import run_gates
    from memledger.verify.runs import Variant, capture_in_process

    def runner(script, argv, variant, steps, out):
        order = "sorted" if variant.policy == "none" else "reversed"
        return capture_in_process(script, [*argv, "--order", order], variant, steps)

    rep = run_gates(HERE / "train_per_param_opt.py", ["--steps", "3"], [
        Variant("checkpoint:*", "checkpoint:*")], steps=2, runner=runner)
    assert rep.reproducible
    (ck,) = rep.outcomes
    assert ck.passed and ck.comparison.worst_gradient.max_abs == 0.0, ck.reason


def test_per_parameter_optimizers_make_one_step_and_policies_are_exact():
    """Eight optimizers after one backward are one training step (trace/steps.py); the
    ledger equals the allocator and each policy's prediction its measurement."""
    run = run_client("train_per_param_opt.py", ["--order", "set", "--steps", "3"], [
        "checkpoint:*", "selective:*", "offload:*"])
    assert run.summary.steps_traced == 2
    assert run.ledger_peak == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
