"""bidirectional-cross-attention (tests/clients/train_bidir.py): lucidrains'
`BidirectionalCrossAttentionTransformer` between two sequences (12 video tokens of dim 32, 20
audio tokens), one similarity matrix softmaxed along each length, a feedforward per
sequence, `net.layers.{i}` a `ModuleList` of [attention, feedforward, context feedforward];
and one `BidirectionalCrossAttention` layer (`--model attn`).

Measured (`tests/clients/harness.py run_client`, the helper hunt53c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread, 2 steps unless said; ledger = allocator,
every policy predicted = measured):
- `--mask x --talking-heads` (1 step, the test): 795,308 B; `checkpoint:net.layers.*.*`
  683,112, `offload:@BidirectionalCrossAttention` 683,112, `selective:@Sequential` 712,428
  (2 steps: 1,120,308 B; 802,260, 925,364 and 1,037,428 B).
- `--mask x`: 1,089,380 B; `checkpoint:net` 1,110,868, `offload:net` 725,468,
  `checkpoint:@BidirectionalCrossAttention` 968,084, `selective:net.layers.1.0` 1,068,948.
- `--mask both --rel-pos --talking-heads --dropout 0.1`: 1,187,512 B; `--mask context
  --amp`: 956,196 B + 5,120 B of kernel scratch = 961,316 B; `--accum 2 --clip --validate
  --mask x`: 1,249,124 B; seven policies each, as measured.
- `--model attn --mask context --talking-heads --dropout 0.1 --prenorm --return-attn
  --context-dim 24`: 250,852 B; eight policies (`checkpoint:net`, `offload:net.*`,
  `selective:@Linear`, a mix on the talking heads and `context_to_out`...) as measured.
The fake ledgers equal the real ones; the doctor finds nothing; `compare` of four policies
under dropout and both masks: gradients bitwise, each prediction exact. `net.layers.*` is a
`ModuleList` of `ModuleList`s and refused alike by both sides; the feedforwards are
`nn.Sequential`s (`@Sequential`; the library's `FeedForward` is a function).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("bidirectional_cross_attention") is None:
    pytest.skip("bidirectional-cross-attention is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_two_sequences_attending_to_each_other_with_a_mask_filled_in_the_call():
    """A key-padding mask on the video tokens alone (the library fills the audio side's with
    `torch.ones` inside each attention call) and talking heads (a 1x1 Conv2d over each
    attention map): checkpoint on every layer part, offload on the attentions and selective
    on the feedforwards, each predicted and measured to the byte; the doctor finds nothing."""
    argv = ["--mask", "x", "--talking-heads"]
    pols = {"checkpoint:net.layers.*.*": 683_112,
            "offload:@BidirectionalCrossAttention": 683_112,
            "selective:@Sequential": 712_428}
    run = run_client("train_bidir.py", argv, list(pols), steps=1)
    # pinned on AVX2; the relations hold on every CPU kind (Note [Numbers that depend on the
    # CPU], harness.py): the talking heads are a Conv2d, none seen here
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=795_308)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert_one_doctor_error("train_bidir.py", argv, 2, None, "")
