"""A checkpointed region whose saves are all its argument and its parameters
(tests/clients/train_rerun_fork.py): torch re-runs it at their first unpack and forks the
CPU generator's state before stopping at once (Note [A re-run that stops before its first
op], replay/engine.py)."""

from tests.clients.harness import run_client


def test_a_rerun_that_stops_before_its_first_op_still_forks_the_generator_state():
    """`Scale` (`x * g + b`) saves only its argument and `g`: no segment to re-run, but
    torch's re-run forks the generator state (5,056 B) as MulBackward0 unpacks, where the
    second step's backward peaks. Predicted 31,168 B against 35,136 B measured before
    (`checkpoint:scale` and `selective:scale`: the fork left out); the Linear's own
    checkpoint, whose peak is elsewhere, was and is exact."""
    pols = {"checkpoint:scale": 35_136, "selective:scale": 35_136, "checkpoint:fc2": 35_840}
    run = run_client("train_rerun_fork.py", [], list(pols))
    assert run.ledger_peak == run.allocator_peak == 30_784
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
