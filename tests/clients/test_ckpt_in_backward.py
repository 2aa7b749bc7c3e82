"""A checkpoint whose first run is in backward (helper hunt48c), pinned in plain torch
(tests/clients/train_ckpt_in_backward.py): each block runs under no_grad inside a Function
whose backward calls it again with a graph, and the block checkpoints a function of no
module (reentrant) only when its input requires grad, as memory-efficient-attention-
pytorch's chunked attention inside its reversible `Transformer` does
(tests/clients/test_memeff_clients.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt48c, 2026-12-07, torch
2.13.0 CPU; 2 steps, batch 12 in 3 chunks, dim 16, depth 2): ledger = allocator 29,648 B.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_the_state_a_checkpoint_first_run_in_backward_keeps_is_in_the_ledger():
    """Each chunk's checkpoint keeps the CPU generator's state (5,056 B) from its first run,
    inside the Function's backward, to its own backward. The collector dropped a
    checkpoint state taken in backward (Note [A checkpoint whose first run is in
    backward], trace/collector.py): the ledger read 22,216 B against the allocator's
    29,648 B. Recorded now: equal, and a policy on the layer before is predicted as
    measured."""
    run = run_client("train_ckpt_in_backward.py", [], ["checkpoint:inp"])
    assert run.ledger_peak == run.allocator_peak == 29_648
    p = run.policies["checkpoint:inp"]
    assert p.predicted == p.measured == 34_704
