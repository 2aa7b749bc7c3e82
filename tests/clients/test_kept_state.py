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


def _filled(policy: str) -> str:
    return (f"memledger: {policy} would re-run 1, whose forward call filled an empty buffer "
            "of 1, so the re-run would find it full, holding what the forward left, and run "
            "other ops than its forward (a cache the module fills when it finds it empty: "
            "tranception's ALiBi bias; or a state later calls carry on: a spiking neuron's "
            "membrane), which torch's checkpoint cannot replay; offload that module instead")


def test_a_membrane_filled_on_the_first_call_is_refused_alike():
    """Note [A state filled on the first call] (replay/emptied_cache.py): the neuron's
    first call finds `v` empty (`zeros(0)`) and fills it; step 2's call carries it on
    from the one before. Backward's first re-run is step 1's: it finds `v` full, the
    membrane the forward left, and torch's checkpoint finds other saves. Before, predict
    said of `checkpoint:1` "whose forward replaces 1.v by a tensor made from the one
    before" (step 2's call), of `selective:1` "made a buffer of 1 anew from the one
    before, and the next call, reading it, ran other ops", and measure of both "cannot re-run
    1: torch's checkpoint found the re-run unlike the first run (...)". At one step
    measure says the same line (its re-run fails in step 1's backward whatever the
    steps), and predict, which cannot tell the fill of a state carried on from a buffer
    made anew on every call with one call traced, priced `checkpoint:1` and `selective:1`
    (16,068 B each); it now refuses a fill with a graph on the module's only call in the
    same line (fifty-fourth session)."""
    pols = ["checkpoint:1", "selective:1"]
    run = run_client("train_kept_state.py", [], pols)
    assert run.ledger_peak == run.allocator_peak == 5_608
    for policy in pols:
        p = run.policies[policy]
        assert p.predicted is None is p.measured, p
        assert p.predict_refusal == p.measure_refusal == _filled(policy)
    run = run_client("train_kept_state.py", [], pols, steps=1)
    for policy in pols:
        p = run.policies[policy]
        assert p.predicted is None is p.measured, p
        assert p.predict_refusal == p.measure_refusal == _filled(policy)
