"""A permutation kept as a parameter over numpy's memory, the only save of its call
(tests/clients/train_external_index.py; FrEIA's `PermuteRandom`): Note [Model state over
memory torch did not allocate] in memledger/replay/prepared.py."""

from __future__ import annotations

import pytest

from tests.clients.harness import assert_pinned, run_client


@pytest.mark.slow
def test_a_frame_held_by_the_save_of_an_external_index_is_predicted_as_measured():
    """The replay left the external index out with its save, and let each checkpoint frame
    of a permutation go as its call ended; with an inverse pass in the loss the forward's
    frames (5,056 B of RNG state and the (32, 64) fp32 argument, 8,192 B: 13,248 B each)
    are live at the peak. Before: `checkpoint:layers.1` 738,340 B predicted against
    764,836 measured (two frames: the forward's and the inverse's), `checkpoint:layers.3`
    738,340 against 751,588, `checkpoint:layers.*` 707,496 against 720,744."""
    pols = {"checkpoint:layers.1": 764_836, "checkpoint:layers.3": 751_588,
            "checkpoint:layers.*": 720_744}
    run = run_client("train_external_index.py", ["--cycle"], list(pols))
    assert run.ledger_peak == 738_340
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)
