"""A save-list output that SAC's cache hands a re-run, saved too on a branch no loss reaches
(tests/clients/train_unread_handback.py): Note [A handed-back save no backward reads]
(memledger/replay/engine.py)."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_handed_back_output_a_live_unread_save_holds_stays_to_that_nodes_death():
    """Each layer's `fc` output (8 x 64 fp32, 2,048 B), on selective's save list, is saved
    by its `sin` (read) and by its memory's `cos` (never read; the wrapper holds the
    memories through the backward it calls inside its forward). The re-run takes it from
    SAC's cache and packs it again for both; the frame keeps the `cos` copy for its live
    node, so layer 1's output is still held through layer 0's re-run, where the peak is.
    The replay let it go as `sin`'s node returned: `selective:layers.*` was predicted
    49,032 B against 51,080 B measured, `selective:layers.1` 43,976 against 46,024. Now
    predicted = measured."""
    pols = {"selective:layers.*": 51_080, "selective:layers.1": 46_024}
    run = run_client("train_unread_handback.py", [], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 40_456
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
