"""Which blocks `plan` searches, pinned in plain torch (tests/clients/train_plan_saves.py):
a block's saves counted as the replay counts them (Rule 5), and blocks that save nothing
left out of the search (Notes [A block's saves, by its calls], [Blocks that save nothing],
memledger/replay/plan.py).

Measured (`tests/clients/harness.py run_client`, the helper plan46, 2026-12-06, torch 2.13.0
CPU; 2 steps, batch 64). "Before" is a34b2e1 (main before the fix) on the same ledgers.
"""

from __future__ import annotations

import pytest

from memledger.replay.plan import plan, repeated_blocks
from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_plan_ranks_blocks_by_the_replays_saves():
    """`downs.{i}` (one matmul, wide to narrow: its first op saves its wide input, recorded
    one event before its call) alternate with `tower.ups.{i}` (narrow to wide, whose wide
    output the next call's matmul saves, recorded at its own last event). Counted on a
    call's own events, `tower.ups.*` saved 393,216 B and `downs.*` nothing: plan searched
    `tower.ups.*` and said no candidate fits 300,000 B, the lowest 397,060 B (the
    baseline). By the replay's count `downs.*` saves those 393,216 B (`tower.ups.*` their
    12,288 B of narrow inputs): `offload:downs.[0-1]`, 265,988 B predicted and measured."""
    run = run_client("train_plan_saves.py", ["--case", "rank"], ["offload:downs.[0-1]"])
    assert run.ledger_peak == run.allocator_peak == 397_060
    assert repeated_blocks(run.ledger) == ["downs.0", "downs.1", "downs.2"]
    rep = plan(run.ledger, 300_000, front_points=0)
    assert (rep.fits, rep.policy, rep.predicted_peak_bytes) == \
        (True, "offload:downs.[0-1]", 265_988)
    p = run.policies["offload:downs.[0-1]"]
    assert (p.predicted, p.measured) == (265_988, 265_988)


def test_plan_leaves_out_blocks_that_save_nothing():
    """Two MLP blocks and an `nn.Identity` (`blocks.2`, which runs no op). Before, plan
    searched all three, 64 assignments, for the same answer; now the identity is left out
    (16 assignments) and named, and the answer's selectors do not take it in. The policies
    on it are the baseline, predicted and measured (44,972 B)."""
    run = run_client("train_plan_saves.py", ["--case", "identity"],
                     ["offload:blocks.[0-1]", "checkpoint:blocks.2"])
    assert run.ledger_peak == run.allocator_peak == 44_972
    rep = plan(run.ledger, 36_000, front_points=0)
    assert (rep.blocks, rep.left_out, rep.assignments) == (["blocks.0", "blocks.1"],
                                                           ["blocks.2"], 16)
    assert (rep.policy, rep.predicted_peak_bytes, rep.choice) == \
        ("offload:blocks.[0-1]", 34_892, ["offload", "offload"])
    for text, peak in (("offload:blocks.[0-1]", 34_892), ("checkpoint:blocks.2", 44_972)):
        p = run.policies[text]
        assert (p.predicted, p.measured) == (peak, peak), text

    from memledger.commands.common import console
    from memledger.commands.plan import _render
    with console.capture() as cap:
        _render(rep, "36,000 B", front=False, shared=False)
    assert "left out 1 block that saves nothing for backward (blocks.2): no option on " \
        "them changes the peak" in " ".join(cap.get().split())


def test_plan_takes_a_top_level_sequentials_blocks():
    """The model is an `nn.Sequential` (Linear, two stages of two MLP blocks, LayerNorm,
    Linear), as mlp-mixer-pytorch's `MLPMixer`. A numbered group needed a container's name,
    so plan took the halves of stage `1` (`1.0`, `1.1`) as the blocks and never stage `2`
    (Note [A model that is itself a Sequential]): the top-level stages are the blocks now,
    the Linear and LayerNorm between them left out, and the selectors write the indices
    (a bare `*` would take those in too)."""
    run = run_client("train_plan_saves.py", ["--case", "sequential"], ["offload:[1-2]"])
    assert run.ledger_peak == run.allocator_peak == 72_332
    assert repeated_blocks(run.ledger) == ["1", "2"]
    rep = plan(run.ledger, run.policies["offload:[1-2]"].predicted, front_points=0)
    p = run.policies["offload:[1-2]"]
    assert (rep.policy, rep.predicted_peak_bytes) == ("offload:[1-2]", p.predicted)
    assert p.predicted == p.measured == 46_188
