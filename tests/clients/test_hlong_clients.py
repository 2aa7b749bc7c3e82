"""h-transformer-1d and long-short-transformer (tests/clients/train_hlong.py): lucidrains'
hierarchical attention LM (`HTransformer1D`, one `RotaryEmbedding` shared by every layer,
its layers in a `SequentialSequence` or a `ReversibleSequence`) and long-short LM
(`LongShortTransformer`: windowed local plus low-rank global attention), each through its
library's `AutoregressiveWrapper`, Adam.

Measured (`tests/clients/harness.py run_client`, the helper hunt49n, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, no kernel scratch,
every policy predicted = measured, the fake ledger = the real one):
- `--lib h --causal --shift` (1 step): 515,232 B; `checkpoint:net.layers.layers.*.*`
  416,472 B, `offload:@CausalHAttention1D` 418,592 B, `selective:@PreNorm` 471,904 B.
  2 steps: 575,756 B; offload 479,116 B, selective 532,428 B.
- `--lib h` (2 steps): 578,316 B; `offload:@HAttention1D` 478,988 B.
- `--lib h --causal --reversible` (2 steps): 521,364 B; `checkpoint:net.layers`,
  `offload:net.layers.blocks.0`, `selective:@CausalHAttention1D` all 521,364 B (the
  reversible Function keeps no activations for them to drop). `--reversible --mask`
  524,692 B, alike.
- `--lib ls` (1 step): 550,208 B; `checkpoint:net.layers.*.*` and `offload:net.layers.0.0+
  selective:net.layers.1.1` 538,608 B. 2 steps: 607,324 B; `offload:@LongShortAttention`
  538,608 B. `--bidirectional`: 634,588 B; `checkpoint:@PreNorm` 538,800 B.
Half of every peak is the shared rotary embedding's 256 KiB `cached_freqs` buffer.
The doctor finds nothing on either loop; with `--reversible` it warns (rightly) that
`loss` keeps its graph, and the 8 KiB the reversible Function keeps on ctx, past the step.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("h_transformer_1d") is None \
        or importlib.util.find_spec("long_short_transformer") is None:
    pytest.skip("h-transformer-1d or long-short-transformer is not installed",
                allow_module_level=True)
pytestmark = pytest.mark.clients


def test_hierarchical_and_long_short_lms_are_predicted_as_measured():
    """The causal hierarchical-attention LM with token shifts: a policy on every layer's
    two halves, offload on the attentions by class and selective on every `PreNorm`, each
    predicted and measured to the byte, the doctor finding nothing on its loop; then the
    long-short LM with a checkpoint on every half-layer."""
    h = ["--lib", "h", "--causal", "--shift"]
    pols = {"checkpoint:net.layers.layers.*.*": 416_472,
            "offload:@CausalHAttention1D": 418_592,
            "selective:@PreNorm": 471_904}
    run = run_client("train_hlong.py", h, list(pols), steps=1)
    assert run.ledger.peak_with_scratch() == run.ledger_peak == run.allocator_peak == 515_232
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_hlong.py", h, 2, None, "")

    ckpt = "checkpoint:net.layers.*.*"
    run = run_client("train_hlong.py", ["--lib", "ls"], [ckpt], steps=1)
    assert run.ledger_peak == run.allocator_peak == 550_208
    assert run.policies[ckpt].predicted == run.policies[ckpt].measured == 538_608
