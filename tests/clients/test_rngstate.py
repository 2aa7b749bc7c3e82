"""measure's re-run guard holding what it judges (helper guard46), pinned in plain torch
(tests/clients/train_rngstate.py): a block that records `torch.get_rng_state()` as a plain
attribute on every forward, as linear-attention-transformer's reversible blocks do
(tests/clients/test_linattn_clients.py).

Measured (`tests/clients/harness.py run_client`, the helper guard46, 2026-12-06, torch
2.13.0 CPU; 2 steps, batch 16, dim 16, hidden 64, depth 2): ledger = allocator 97,532 B.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_state_the_rerun_replaces_goes_when_it_would():
    """Each block keeps the CPU generator's state (`cpu_state`, 5,056 B) its last forward
    recorded; a checkpoint's re-run records it again, and the untraced run frees the old
    one there. measure's `_RegionForward` held every tensor attribute of the region strongly
    from the re-run's start to its end, to judge what the re-run replaced (Note [What the
    forward call left]), so the old state lived to the re-run's end in the measured run
    only: `selective:blocks.0` measured 100,668 B against 98,748 B predicted,
    `checkpoint:blocks.0` 99,644 B against 97,724 B (1,920 B over each, at the peak the
    re-run reaches). The re-run's start now keeps a weak reference and a digest (Note [A
    replaced state, judged by its digest], memledger/measure/apply.py): predicted =
    measured."""
    run = run_client("train_rngstate.py", [], ["selective:blocks.0", "checkpoint:blocks.0"])
    assert run.ledger_peak == run.allocator_peak == 97_532
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {"selective:blocks.0": (98_748, 98_748),
                   "checkpoint:blocks.0": (97_724, 97_724)}
