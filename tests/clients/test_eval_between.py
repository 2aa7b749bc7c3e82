"""A loop that switches the model's mode between a forward and its backward (tests/clients/
train_eval_between.py): pytorch-accelerated's `StepBasedEvaluationCallback` in plain torch
(an evaluation under no_grad before `loss.backward()` leaves the model in eval mode), and
the opposite (forward in eval, `model.train()` before the backward).

Measured (`tests/clients/harness.py run_client`, the helper hunt49i, 2026-12-07, torch
2.13.0 CPU, one intra-op thread; 2 steps, batch 8, dim 16, 2 blocks of Linear, BatchNorm1d,
Dropout; an AMD EPYC, AVX2): the ledger 9,780 B + 128 B of kernel scratch = the allocator
9,908 B (eval before backward), 7,708 B = 7,708 (the opposite); `offload:blocks.*`
6,940 B and 6,812 B predicted and measured.
"""

from __future__ import annotations

import pytest

from memledger.replay.stateful import mode_message
from tests.clients.harness import assert_pinned, run_client

pytestmark = pytest.mark.clients


@pytest.mark.parametrize("backward_mode, peak, offloaded", [
    ("eval", 9_908, 6_940),
    ("train", 7_708, 6_812),
])
def test_a_rerun_in_another_mode_is_refused_alike(backward_mode, peak, offloaded):
    """predict priced `checkpoint:blocks.*` (21,424 B; 21,148 B the opposite way) and
    `selective:@Block` where measure refused them (torch's "A different number of tensors
    was saved"; the opposite way, a state write the train-mode re-run made). The trace now
    records the modules a backward finds in another mode than their forward had, and both
    refuse in one line (Note [A re-run in another mode], memledger/trace/modes.py); offload
    re-runs nothing and stays predicted."""
    pols = ["checkpoint:blocks.*", "selective:@Block", "offload:blocks.*"]
    run = run_client("train_eval_between.py", ["--backward-mode", backward_mode], pols)
    # Note [Numbers that depend on the CPU] (harness.py): 128 B of kernel scratch in the
    # eval-before-backward run on this AVX2 box
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=peak)
    forward_training = backward_mode == "eval"
    for pol in pols[:2]:
        p = run.policies[pol]
        assert p.predicted is None is p.measured, p
        assert p.predict_refusal == p.measure_refusal == \
            "memledger: " + mode_message(pol, "blocks.1", "blocks.1", forward_training), p
    p = run.policies["offload:blocks.*"]
    assert p.predicted == p.measured
    assert_pinned(p.measured, avx2=offloaded)


def test_a_rerun_of_modules_that_read_no_flag_runs():
    """`--block plain` (LayerNorm, Linear, GELU: none reads its `training` flag) under
    `model.eval()` between the forward and the backward: a re-run in eval mode computes
    what the forward did (`compare`: gradients bitwise). Before the fiftieth session both
    sides refused every region whose modes moved; they now run and agree (Note [Which
    modules read a training flag], memledger/trace/mode_readers.py)."""
    pols = ["checkpoint:blocks.*", "selective:@PlainBlock", "offload:blocks.*"]
    run = run_client("train_eval_between.py", ["--block", "plain"], pols)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 8_356
    got = {pol: (run.policies[pol].predicted, run.policies[pol].measured) for pol in pols}
    assert got == {"checkpoint:blocks.*": (20_428, 20_428),
                   "selective:@PlainBlock": (20_940, 20_940),
                   "offload:blocks.*": (6_924, 6_924)}, run.policies


def test_a_flag_read_in_a_helper_method_is_still_refused():
    """`--block noisy`: a custom module adds noise in training, reading `self.training` in
    a helper method its forward calls (in eval mode the re-run would draw no noise: other
    gradients, no error of torch's). Both sides refuse the blocks in one line; the block's
    Linear alone holds no module that reads a flag and runs (refused before the fiftieth
    session: every moved module counted)."""
    pols = ["checkpoint:blocks.*", "selective:@NoisyBlock", "checkpoint:blocks.1.fc"]
    run = run_client("train_eval_between.py", ["--block", "noisy"], pols)
    # Note [Numbers that depend on the CPU] (harness.py): 12 B of kernel scratch here
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=7_472)
    for pol in pols[:2]:
        p = run.policies[pol]
        assert p.predicted is None is p.measured, p
        assert p.predict_refusal == p.measure_refusal == \
            "memledger: " + mode_message(pol, "blocks.1", "blocks.1", True), p
    p = run.policies["checkpoint:blocks.1.fc"]
    assert p.predicted == p.measured
    assert_pinned(p.measured, avx2=15_052)


def test_a_mode_the_region_sets_itself_is_no_switch_of_the_scripts():
    """`--block frozen --backward-mode none`: each block's forward puts its frozen encoder
    (a Linear and a Dropout) in eval mode and runs it under no_grad, as discrete-key-value-
    bottleneck-pytorch's bottleneck does; the loop never switches modes. measure refused
    `checkpoint:blocks.*` and `selective:@FrozenEncoderBlock` ("would re-run blocks.1 in
    eval mode (its blocks.1.encoder first) ...: the script switches the model's mode
    between a forward and its backward") where predict priced them (23,308 and 24,332 B):
    the encoder began the first run in train mode and the re-run in eval, which the block
    itself had set. Both run now, as predicted (Note [A mode the region sets itself],
    memledger/measure/apply.py)."""
    pols = {"checkpoint:blocks.*": 23_308, "selective:@FrozenEncoderBlock": 24_332,
            "offload:blocks.*": 8_204}
    run = run_client("train_eval_between.py", ["--block", "frozen", "--backward-mode", "none"],
                     list(pols))
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 9_228
    for pol, peak in pols.items():
        assert (run.policies[pol].predicted, run.policies[pol].measured) == (peak, peak), \
            run.policies[pol]
