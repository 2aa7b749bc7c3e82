"""A state initialised through `.data` on a module's first call (tests/clients/
train_data_write.py): routing-transformer's `Kmeans` in plain torch
(tests/clients/test_routing_clients.py, which skips without the library).

Measured (`tests/clients/harness.py run_client`, the helper hunt47a, 2026-12-06, torch
2.13.0 CPU; 1 step, batch 8, dim 16, 4 clusters, 2 blocks): the ledger 12,202 B with 12 B
of kernel scratch, the allocator 12,214 B; `offload:blocks.*` 12,214 B predicted and
measured.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_selective_rerun_after_a_write_through_data_is_refused_alike():
    """The blocks' first call writes `means` and `initted` through `.data` (no version
    counter moves); the re-run skips that branch, and torch's selective cache handed its
    first `mm` the init's (4, 16) output: the script failed under `selective:blocks.*` ("The
    size of tensor a (4) must match the size of tensor b (16)", exit 3) where predict
    refused it. measure now sees the write by its digest and says predict's line (Note [A
    write through .data, seen by its digest], memledger/measure/apply.py)."""
    # `initted` before `means`: Note [The state named first, by name] (replay/stateful.py)
    pol = "selective:blocks.*"
    run = run_client("train_data_write.py", [], [pol, "offload:blocks.*"], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 12_214
    p = run.policies[pol]
    assert p.predicted is None is p.measured
    assert p.predict_refusal == p.measure_refusal == (
        f"memledger: {pol} would re-run blocks.1, whose forward writes blocks.1.initted "
        "in place, so the re-run would start from what the forward left and compute other "
        "values (other gradients, or a metric that counts the batch twice); offload that "
        "module instead, or keep that write out of the region")
    p = run.policies["offload:blocks.*"]
    assert p.predicted == p.measured == 12_214


def test_a_rerun_that_writes_through_data_again_is_refused_alike():
    """`--ema`: every training call also moves `means` through `.data.lerp_` (vector-
    quantize-pytorch's EMA codebook, inside discrete-key-value-bottleneck-pytorch), so a
    checkpoint's re-run moves them a second time. predict refused `checkpoint:blocks.*`;
    measure, which judged a re-run's writes by version counters alone, ran it (Note [A
    re-run's write through .data], memledger/measure/apply.py). Both refuse in one line."""
    # the first call also writes `initted`, named before `means` (Note [The state named
    # first, by name], replay/stateful.py)
    pol = "checkpoint:blocks.*"
    run = run_client("train_data_write.py", ["--ema"], [pol], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    p = run.policies[pol]
    assert p.predicted is None is p.measured, p
    assert p.predict_refusal == p.measure_refusal == (
        f"memledger: {pol} would re-run blocks.1, whose forward writes blocks.1.initted "
        "in place, so the re-run would start from what the forward left and compute other "
        "values (other gradients, or a metric that counts the batch twice); offload that "
        "module instead, or keep that write out of the region")
