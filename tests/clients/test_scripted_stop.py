"""A re-run whose early stop falls inside a `torch.jit.script` function
(tests/clients/train_scripted_stop.py; Note [An early stop TorchScript dropped],
memledger/measure/apply.py). Plain torch: assoc-scan's `AssocScan` has this shape (its
tier, test_scan_clients.py, skips without the library).

Measured (the helper hunt56c, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX-512 bf16), one
intra-op thread; 2 steps, batch 2, 16 steps of time, dim 8, 2 blocks): ledger = allocator
36,968 B, no kernel scratch. `checkpoint:blocks.0.scan` predicted 35,880 B; measure
said "the script failed" (the interpreter's RuntimeError) before, 35,880 B now;
`selective:@Scan` 45,256 B likewise; `checkpoint:blocks.*` 37,800 and `offload:
blocks.*.scan` 24,776 B predicted = measured before and after. `--tail` (a Linear after
the scan: the last save in Python) was exact before: 38,648 B under
`checkpoint:blocks.0.scan`.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_a_stop_inside_torchscript_ends_the_rerun_as_torchs_own():
    """The scan's last save is the scripted combine's `addcmul`: the re-run's pack hook
    raises torch's stop there, the TorchScript interpreter turns it into a RuntimeError of
    its own with no cause, and torch's checkpoint failed the backward. Now the error that
    leaves the region's function once the re-run has packed every tensor the first run
    saved is that stop: measured as predicted, to the byte."""
    pols = {"checkpoint:blocks.0.scan": 35_880, "selective:@Scan": 45_256,
            "checkpoint:blocks.*": 37_800, "offload:blocks.*.scan": 24_776}
    run = run_client("train_scripted_stop.py", [], list(pols))
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 36_968
    for policy, peak in pols.items():
        got = run.policies[policy]
        assert (got.predict_refusal, got.measure_refusal) == ("", ""), policy
        assert (got.predicted, got.measured) == (peak, peak), policy


def test_an_error_of_the_script_inside_torchscript_still_fails_it():
    """Only a stop is taken for one: the same region's first run, with nothing to stop,
    passes the interpreter's own errors on (a shape mismatch inside `combine`)."""
    import torch

    from memledger.measure.apply import _stop_reached
    from tests.clients.train_scripted_stop import combine

    assert not _stop_reached()   # no re-run in flight
    with pytest.raises(RuntimeError, match="TorchScript interpreter"):
        combine(torch.ones(2), torch.ones(2), torch.ones(3), torch.ones(3))
