"""A storage two backward passes of a step read, offloaded (tests/clients/train_two_passes.py):
memformer's `memory_replay_backprop` cut down (tests/clients/test_memformer_mlm_clients.py,
`--mode mrbp`), the replay's fix of the fifty-first session (the helper fix51b).

Measured (`tests/clients/harness.py run_client`, the helper fix51b, 2026-12-07, torch 2.13.0
CPU, AMD EPYC (AVX2), one intra-op thread; 1 step, batch 8, dim 32; no kernel scratch).
"Before" is the replay of this commit's parent on the same ledger.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_the_read_back_rounds_of_a_storage_two_passes_read():
    """The step's memory `m`, a leaf, is read by `read` (on both losses' paths), by `update`
    (on the next memory's only) and by the product `(update(m) + r) * m` outside both,
    which keeps `m` on the device; the loop back-propagates the loss, then the next
    memory, both with `retain_graph=True`. measure's offloader reads `m` back at `read`'s
    first read and holds the copy to `update`'s read in the second pass (every save held
    read: the round is over), then reads it back again for `read`'s second read and holds
    that copy while `update`'s save, not read again, lives: to the step's end. The replay
    ended the second pass's copy at the storage's last reader's return, and counted a
    second pass's copy for `update` alone, which only the second pass reads: before,
    `offload:read+offload:update` 32,620 B predicted against 32,748 B measured,
    `offload:update` 32,620 against 31,724. It now runs the offloader's rounds over every
    read the unpack records name (Note [Rounds of a read-back, replayed], memledger/
    replay/engine.py)."""
    pols = ["offload:read+offload:update", "offload:read", "offload:update"]
    run = run_client("train_two_passes.py", [], pols, steps=1)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 31_724
    for policy, peak in zip(pols, (32_748, 32_620, 31_724)):
        p = run.policies[policy]
        assert (p.predicted, p.measured) == (peak, peak), policy
