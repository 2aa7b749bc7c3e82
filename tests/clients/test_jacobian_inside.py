"""A forward that takes a Jacobian of its own part (tests/clients/train_jacobian_inside.py,
as pypose's EKF does): a backward pass inside the forward (Note [A pass inside the
forward], trace/collector.py) and an offload round that a later save joins (Note [A round
a later save joins], replay/engine.py).

Measured (`run_client`, the helper fix52d, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2),
one intra-op thread; ledger = allocator), 3 frames, 1 step, `offload:g`:
- `--ref none`: 424 B; 408 B (the batch moved off), predicted 424 before (read as held
  by the script into the Jacobian's pass).
- `--ref drop`: 424 B; 452 B, predicted 456 before (the reference call's unread save held
  the copy to the storage's free).
- `--ref keep`: 456 B; 472 B, predicted 488 before."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("ref,ledger,offloaded", [("none", 424, 408), ("drop", 424, 452),
                                                   ("keep", 456, 472)])
def test_offload_around_a_jacobian_taken_inside_the_forward(ref, ledger, offloaded):
    run = run_client("train_jacobian_inside.py", ["--ref", ref], ["offload:g"], steps=1)
    assert run.ledger_peak == run.allocator_peak == ledger
    assert run.policies["offload:g"].predicted == run.policies["offload:g"].measured == \
        offloaded
