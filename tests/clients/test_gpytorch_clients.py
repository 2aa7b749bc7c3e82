"""GPyTorch exact GPs (tests/clients/train_gpytorch.py): linear_operator's custom autograd
Functions (Cholesky, CG with Lanczos in a TorchScript function), a deep-kernel model whose
`ExactGP.__call__` no module hook sees. Skipped without gpytorch.

gpytorch is imported here, before any pass: its import makes two 4 B tensors, which in one
process only the first pass would count; a fresh process per pass (`memledger trace`)
counts them in each."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("gpytorch")
_imported = imported_first("gpytorch")


def test_scratch_of_a_sum_among_out_calls():
    """Note [Calls that made nothing] (trace/allocator.py): CG's TorchScript function calls
    `sum`, `mul`, `lt` with `out=`, so the allocator pass counted 216 `sum` calls against
    the ledger's 54 events and dropped every `sum`'s scratch; the loss's backward peaks in a
    `sum` that takes 8 B of scratch (on 2 threads; in a process that set 1 thread, none):
    the ledger read 8 B under. Now every byte."""
    run = run_client("train_gpytorch.py", ["--case", "cg", "--steps", "3"], [])
    assert run.ledger.peak_with_scratch() == run.allocator_peak


def test_a_region_found_at_its_own_first_call():
    """Note [The call that found the model] (measure/apply.py): `ExactGP.__call__` is
    gpytorch's, so the model is found at `feature_extractor`'s first call, whose forward
    torch had read before the policy wrapped it: that call ran plain, and step 1's backward
    held the MLP's activations. `checkpoint:feature_extractor` was measured 642,680 B
    against 626,320 B predicted, `offload:feature_extractor` 642,680 against 621,264.
    Now each is exact, as the per-block policies were."""
    run = run_client("train_gpytorch.py", ["--case", "dkl", "--steps", "4"], [
        "checkpoint:feature_extractor", "offload:feature_extractor",
        "checkpoint:feature_extractor.0+offload:feature_extractor.[1-2]"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
