"""A head that writes two running-statistics buffers in place in its forward, in another
order than it registered them (tests/clients/train_running_stats.py): hl-gauss-pytorch's
`RunningStats` in plain torch (tests/clients/test_hl_gauss_clients.py, which skips without
the library).

Measured (`tests/clients/harness.py run_client`, the helper fix55h, 2026-12-07, torch 2.13.0
CPU; 2 steps, batch 8, dim 16): the ledger = the allocator at 3,416 B; `offload:head`
3,416 B predicted and measured.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_two_buffers_written_in_place_are_named_alike():
    """`step` is registered before `running_mean`, and the forward writes `running_mean`
    first: predict named the first write ("writes head.running_mean in place"), measure the
    first buffer it holds ("writes head.step in place"). Both now name the first by name
    (Note [The state named first, by name], memledger/replay/stateful.py)."""
    pol = "checkpoint:head"
    run = run_client("train_running_stats.py", [], [pol, "offload:head"], steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 3_416
    p = run.policies[pol]
    assert p.predicted is None is p.measured
    assert p.predict_refusal == p.measure_refusal == (
        f"memledger: {pol} would re-run head, whose forward writes head.running_mean in "
        "place, so the re-run would start from what the forward left and compute other "
        "values (other gradients, or a metric that counts the batch twice); offload that "
        "module instead, or keep that write out of the region")
    p = run.policies["offload:head"]
    assert p.predicted == p.measured == 3_416, p
