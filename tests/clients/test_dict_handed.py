"""A block handed a dict that replaces its entry lets the old tensor go at the assignment
(tests/clients/train_dict_handed.py; Note [Versions read without holding the tensor],
memledger/trace/outside_state.py). The trace read each call's tensor arguments' versions,
those inside its dict arguments too, holding the tensors to the call's return: the
ledger kept the replaced (256, 16) fp32 entry, 16,384 B, through the block's peak (its
(256, 256) product under no_grad), which the untraced run never held.

Measured (`run_client`, the helper hunt51b, 2026-12-07, torch 2.13.0 CPU, AMD EPYC AVX2,
one intra-op thread; no kernel scratch at the peak): before, ledger 721,552 B against the
allocator's 705,168 B, `offload:*` 639,628 B predicted against 623,244 B measured,
`checkpoint:*.up` 731,664 against 715,280 (each 16,384 B over); after, each as measured.
`checkpoint:*` is refused by both (the block stores new tensors into the dict).
"""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_dict_entry_the_block_replaces_goes_at_the_assignment():
    pols = {"offload:*": 623_244, "checkpoint:*.up": 715_280}
    run = run_client("train_dict_handed.py", [], [*pols, "checkpoint:*"], steps=2)
    # the peak: a block's (256, 256) fp32 product, 262,144 B, beside the activations
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 705_168
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    refused = run.policies["checkpoint:*"]
    assert refused.predicted is None and refused.measured is None
    assert "stores new tensors into the dict" in refused.predict_refusal
