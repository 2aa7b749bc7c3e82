"""deformable-attention and mixture-of-attention (tests/clients/train_routed_attn.py):
lucidrains' `DeformableAttention` (keys / values bilinearly sampled by `F.grid_sample` at
offsets a strided depthwise conv predicts, a continuous position bias MLP) and
`MixtureOfAttention` (colt5's coordinate-descent router picks tokens per expert, the
experts' outputs `scatter_add`ed back, unrouted tokens given a learned null token), each in
residual blocks with a feed-forward (AdamW).

Measured (`tests/clients/harness.py run_client`, the helper hunt49o, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; 2 steps; ledger = allocator, no kernel
scratch; every policy predicted = measured; selectors as hunt49o took them, relative to
the `blocks` Sequential, then the first top-level module with parameters the script
called; the test's read `blocks.` before each since the fiftieth session (the helper
fix50a), the `nn.ModuleDict` the script binds as `model` and the optimizer trains being
the model: Note [A model held by the script], memledger/trace/roots.py; the same bytes):
- `--mode moa`: 216,380 B; `checkpoint:*` 171,180 B, `selective:*` 191,548 B, `offload:*`
  123,644 B, `checkpoint:0+offload:1` 171,180 B, `checkpoint:*.attn` 180,732 B,
  `offload:*.attn` 123,660 B, `selective:*.attn` 193,788 B, `checkpoint:0.attn.attn+
  selective:1.ff` 207,292 B. With `--iters 4` (the test): 181,564 B; 153,260, 173,116,
  123,132, 153,260, 162,300, 123,132, 175,356 and 172,476 B in the same order.
- `--mode deform2d`: 937,068 B; `checkpoint:*` 559,084 B, `selective:*` 786,924 B,
  `offload:*` 335,532 B, `checkpoint:0+offload:1` 545,264 B, `checkpoint:*.attn` 600,044 B,
  `offload:*.attn` 376,492 B, `selective:*.attn` 803,308 B. One step (the test): 904,884 B;
  `checkpoint:*` 526,900 B, `selective:*` 754,740 B, `offload:*` 303,344 B, `checkpoint:0+
  offload:1` 513,080 B, `checkpoint:*.attn` 567,860 B, `offload:*.attn` 344,304 B,
  `selective:*.attn` 771,124 B.
- `--mode deform1d`: 421,932 B; `checkpoint:*` 273,580 B, `selective:*` 390,572 B,
  `offload:*` 184,172 B, `checkpoint:0+offload:1` 267,536 B, `checkpoint:*.attn` 294,060 B,
  `offload:*.attn` 204,652 B, `selective:*.attn` 398,764 B.
`trace --fake` equals the real ledger in all three modes; the doctor finds nothing with
`--validate --accum 2` in any (not run here: +0.7 s CPU).
"""

import importlib.util

import pytest

from tests.clients.harness import run_client

if (importlib.util.find_spec("mixture_of_attention") is None
        or importlib.util.find_spec("deformable_attention") is None):
    pytest.skip("mixture-of-attention / deformable-attention is not installed",
                allow_module_level=True)
pytestmark = pytest.mark.clients


def test_routed_attention_experts_are_predicted_as_measured():
    """Tokens routed to attention experts by a top-k router and scattered back: a checkpoint
    on every block, selective on the mixtures, and a mix of a checkpoint on block 0's experts
    with selective on block 1's feed-forward, each predicted and measured to the byte."""
    argv = ["--mode", "moa", "--iters", "4"]     # 20 router iterations: +2 s of CPU
    pols = {"checkpoint:blocks.*": 153_260, "selective:blocks.*.attn": 175_356,
            "checkpoint:blocks.0.attn.attn+selective:blocks.1.ff": 172_476}
    run = run_client("train_routed_attn.py", argv, list(pols))
    assert run.ledger_peak == run.allocator_peak == 181_564
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_deformable_attention_grid_sampled_keys_are_predicted_as_measured():
    """Keys and values bilinearly sampled at learned offsets (`F.grid_sample`, whose
    backward needs the input and the grid): checkpoint on every block, offload on the
    attentions, and a mix, each predicted and measured to the byte."""
    pols = {"checkpoint:blocks.*": 526_900, "offload:blocks.*.attn": 344_304,
            "checkpoint:blocks.0+offload:blocks.1": 513_080}
    run = run_client("train_routed_attn.py", ["--mode", "deform2d"], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 904_884
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
