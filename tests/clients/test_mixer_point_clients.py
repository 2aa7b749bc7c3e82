"""mlp-mixer-pytorch (tests/clients/train_mlp_mixer.py) and point-transformer-pytorch
(tests/clients/train_point_transformer.py), lucidrains' both, a tiny classifier each.

MLP-Mixer: `MLPMixer(...)` is itself an `nn.Sequential` (Rearrange into patches, a Linear,
the blocks `2`, `3` of token mixing by 1x1 Conv1d and channel mixing by Linear behind
`PreNormResidual`, LayerNorm, Reduce, the head). Point Transformer: `PointTransformerLayer`
(queries minus keys, relative positions through an MLP, an attention MLP, softmax over the
neighbours) with its k nearest gathered by `topk` and `gather`, a mask over padded points.

Measured (`tests/clients/harness.py run_client`, the helper hunt48l, 2026-12-07, torch
2.13.0 CPU, AVX2, one intra-op thread; 2 steps; ledger = allocator with its kernel scratch,
every policy predicted = measured):
- mixer (defaults): 213,364 B + 12 B = 213,376 B; `offload:[2-3]` (plan's pick at 80 %)
  152,928 B, `checkpoint:[2-3]` 166,688 B, `selective:2+offload:3` 178,816 B,
  `checkpoint:*` 171,744 B. `--dropout 0.1`: 266,612 + 12 B; `checkpoint:[2-3]` 193,484 B,
  `selective:[2-3]` 219,372 B, `offload:2+checkpoint:3.1` 183,596 B. `--amp`: 160,948 +
  4,352 B; `checkpoint:[2-3]` 134,304 B, `offload:[2-3]` 126,688 B.
- point transformer `--neighbors 4 --mask`: 288,820 B (1 step, the test: 251,776 B;
  `checkpoint:layers.*` 168,784 B, `offload:layers.*` 102,456 B); `checkpoint:layers.*` 205,824 B,
  `offload:layers.*` 139,496 B, `checkpoint:layers.*.attn_mlp` 275,528 B; `selective:` refused
  alike (the attention MLP's output is masked in place). Without neighbours or mask: 403,708
  B; `checkpoint:` 289,320, `selective:` 387,048, `offload:` 212,860 B. `--multihead 2
  --neighbors 4 --mask`: 500,696 B; `checkpoint:` 347,792 B.
The fake ledgers equal the real ones on all four runs tried; the doctor finds nothing.
"""

import importlib.util

import pytest

from memledger.replay.plan import plan, repeated_blocks
from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

pytestmark = pytest.mark.clients


@pytest.mark.skipif(importlib.util.find_spec("mlp_mixer_pytorch") is None,
                    reason="mlp-mixer-pytorch is not installed")
def test_a_mixer_that_is_a_sequential_is_planned_by_its_blocks():
    """The model is a top-level `nn.Sequential`, its blocks `2` and `3`. Plan took the two
    halves of block `2` (`2.0`, `2.1`) as the blocks and never `3`: at 80 % it chose
    `offload:2.*` (159,104 B), nothing lower on its front, where offloading both blocks is
    152,928 B (Note [A model that is itself a Sequential], replay/plan.py). The policies
    on both blocks, a mix, predicted and measured to the byte; `show`'s per-block table
    reads the blocks as `2` and `3`; the doctor finds nothing."""
    pols = {"offload:[2-3]": 152_928, "checkpoint:[2-3]": 166_688,
            "selective:2+offload:3": 178_816}
    run = run_client("train_mlp_mixer.py", [], list(pols))
    assert run.ledger_peak == 213_364
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=213_376)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert repeated_blocks(run.ledger) == ["2", "3"]
    rep = plan(run.ledger, 152_928, front_points=0)   # old plan: nothing under 159,104 B
    assert (rep.policy, rep.predicted_peak_bytes) == ("offload:[2-3]", 152_928)
    acts = run.summary.activations
    assert acts.by_block["2"] == acts.by_block["3"] > 0
    assert_one_doctor_error("train_mlp_mixer.py", [], 2, None, "")


@pytest.mark.skipif(importlib.util.find_spec("point_transformer_pytorch") is None,
                    reason="point-transformer-pytorch is not installed")
def test_a_point_transformer_with_its_nearest_neighbours_is_predicted_as_measured():
    """Four nearest neighbours gathered by `topk` and `gather`, a mask over the last three
    points: checkpoint and offload on both layers predicted and measured to the byte;
    selective refused by both sides alike (the attention MLP's output is masked in place)."""
    argv = ["--neighbors", "4", "--mask"]
    pols = {"checkpoint:layers.*": 168_784, "offload:layers.*": 102_456,
            "selective:layers.*": None}
    run = run_client("train_point_transformer.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 251_776
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
