"""A checkpointed region handed an argument it never reads, whose own node saved a tensor
no backward reads, in plain torch (tests/clients/train_dead_arg.py; Note [An argument's
dead node, held by the frame] in memledger/replay/engine.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt57d, 2026-12-07, torch
2.13.0 CPU; 2 steps, batch 8, width 16, SGD). Before: the replay held the argument
`t_nodes[i]` (Rule 2) but let the addcmul's save `c` ((100,) float32, 400 B) go where the
baseline's dead node did, with the argument's first free: `checkpoint:vf` 31,880 B
predicted against 32,280 B measured, `selective:vf` 35,464 against 35,864.
"""

from __future__ import annotations

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_an_ignored_arguments_node_keeps_its_save_while_the_frame_holds_it():
    """The frame holds each stage's time `t_nodes[i]` to the region's backward, and with
    it `t_nodes`' addcmul node and the 400 B of `c` it saved for `dt`'s gradient: every
    policy on the vector field is predicted as measured."""
    run = run_client("train_dead_arg.py", [], ["checkpoint:vf", "selective:vf",
                                                "offload:vf"])
    assert run.ledger_peak == run.allocator_peak == 17_908
    got = {t: (p.predicted, p.measured) for t, p in run.policies.items()}
    assert got == {"checkpoint:vf": (32_280, 32_280), "selective:vf": (35_864, 35_864),
                   "offload:vf": (15_988, 15_988)}
