"""A buffer a call saves and then lets go of (tests/clients/train_kept_state.py): Note [A
saved buffer its module lets go of], trace/collector.py."""

import pytest

from tests.clients.harness import run_client

pytestmark = pytest.mark.clients


def test_a_membrane_reset_in_place_then_rebound_is_offloaded_as_measured():
    """Step 2's first time step saves the membrane buffer step 1 left (4 x 16 fp32, 256 B,
    reset in place), and the call rebinds the buffer before its `torch.stack`, where the
    peak is: measure's offloader took the old membrane off the device and it went at the
    rebind; the replay held it to its backward: `offload:1` 4,604 B and `offload:*` 4,324
    B predicted, 256 B over measured. Parameters: 8x16 + 16 + 1 + 16x4 + 4 = 213 floats."""
    run = run_client("train_kept_state.py", [], ["offload:1", "offload:*"])
    assert run.ledger_peak == run.allocator_peak == 5_608
    assert run.policies["offload:1"].predicted == run.policies["offload:1"].measured == 4_348
    assert run.policies["offload:*"].predicted == run.policies["offload:*"].measured == 4_068


def test_plan_searches_neurons_that_save_one_shared_parameter():
    """`--layers 2`: both neurons save `thr`, one storage (a Parameter each, made from one
    tensor, as sinabs' neurons share their default `spike_threshold`). That save made the
    neurons one unit, and rule 4 of Note [Modules that are not blocks] left both out: plan searched `2` and `4` only (16 assignments) and
    said no candidate fits 7,000 B, the lowest 9,048 B (the baseline). A parameter moves
    under no policy, so its saves join nothing (Note [Blocks that share a save])."""
    from memledger.replay.plan import plan

    run = run_client("train_kept_state.py", ["--layers", "2"], ["offload:1+offload:2"])
    assert run.ledger_peak == run.allocator_peak == 9_048
    rep = plan(run.ledger, 7_000, front_points=0)
    assert (rep.fits, rep.modules, rep.assignments) == (True, ["1", "2", "3", "4"], 256)
    assert (rep.policy, rep.predicted_peak_bytes) == ("offload:1+offload:2", 6_792)
    p = run.policies["offload:1+offload:2"]
    assert p.predicted == p.measured == 6_792
