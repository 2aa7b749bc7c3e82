"""zuko (tests/clients/train_zuko.py): normalizing flows whose transforms are lazy modules.

Measured once (`tests/clients/harness.py run_client`, nsf, 2 steps, the lead,
2026-12-05): the ledger explains every byte with the kernel scratch (427,932 B);
`checkpoint:transform.transforms.*.hyper` 378,396 B predicted and measured,
`checkpoint:transform.transforms.*` and `offload:transform` 427,932 B both (they act on
calls that do no work). `reverse` and `cnf` make cyclic garbage (zuko's distributions),
so there the passes differ by what Python's collector freed when (`show` says so).
"""

from decimal import Decimal

import pytest

from tests.clients.harness import imported_first, ledger_pass, skip_without

pytestmark = pytest.mark.clients
skip_without("zuko")
_imported = imported_first("zuko")


@pytest.fixture(scope="module")
def nsf():
    """One ledger pass of `--mode nsf`, 2 steps, for the tests that only read it."""
    return ledger_pass("train_zuko.py", ["--mode", "nsf"], steps=2)


def test_plan_finds_the_hyper_networks_where_the_lazy_transforms_do_their_work(nsf):
    """`MaskedAutoregressiveTransform.forward(c)` returns a torch Transform; its `hyper`
    network runs later, inside `log_prob`, outside any call of the transform. `plan` took
    the transforms for the blocks (their saves counted by path) and at 90 % of the peak
    said "no candidate fits" (Note [Blocks whose work runs outside their calls],
    replay/plan.py)."""
    from memledger.replay.plan import plan, repeated_blocks

    led = nsf
    assert repeated_blocks(led) == ["transform.transforms.0.hyper",
                                    "transform.transforms.1.hyper"]
    report = plan(led, 0, front_points=0, budget_share=Decimal("0.9"))
    assert report.fits and report.policy.endswith("transform.transforms.*.hyper")
    assert report.predicted_peak_bytes <= report.budget_bytes < report.baseline_peak_bytes


def test_a_continuous_flows_ode_is_not_refused_selective_for_reads_of_other_saves():
    """zuko's CNF takes its Jacobian's trace by `autograd.grad(create_graph=True)` inside
    each call of its ODE network; the last Linear's weight is saved by every call and read
    more often than saved in all, but no save made inside a forward call is read twice.
    Predict refused `selective:transform.ode` ("a second backward pass through it"), which
    measure ran: 324,484 B, the baseline (316,228 B at the tolerances the script now
    takes), as checkpoint is predicted (Note [Read again: by
    the save, not the storage], replay/engine.py)."""
    from tests.clients.harness import predicted_peak

    led = ledger_pass("train_zuko.py", ["--mode", "cnf"], steps=1)
    base = predicted_peak(led, "checkpoint:transform.ode")
    assert base is not None and predicted_peak(led, "selective:transform.ode") == base


def test_a_policy_on_lazy_transforms_says_it_changes_nothing(nsf):
    """`checkpoint:transform.transforms.*` acts on calls that saved nothing (the transforms'
    work runs later, in `log_prob`): predicted and measured as the baseline, 427,932 B,
    where predict said nothing of why (Note [A region that saves nothing],
    replay/predict.py); the hyper networks save."""
    from memledger.replay.policies import parse_policy
    from memledger.replay.predict import predict

    lazy, hyper = predict(nsf, [parse_policy("checkpoint:transform.transforms.*"),
                                parse_policy("checkpoint:transform.transforms.*.hyper")],
                          bandwidth=1e9).policies
    assert lazy.empty_regions == ["transform.transforms.0", "transform.transforms.1"]
    assert lazy.saving_bytes == 0
    assert hyper.empty_regions == [] and hyper.saving_bytes > 0
