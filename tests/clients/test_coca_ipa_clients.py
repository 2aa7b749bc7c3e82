"""CoCa-pytorch (tests/clients/train_coca.py): lucidrains' contrastive captioner, a tiny
image encoder of our own attention-pooled by learned queries, unimodal and multimodal text
layers of `ParallelTransformerBlock` (which caches its causal mask and rotary table as
plain attributes on its first call) and `CrossAttention`, caption + contrastive loss in one
forward. invariant-point-attention (tests/clients/train_ipa.py): AlphaFold2's IPA over
residue frames, `IPABlock`s with `IPATransformer`'s frame updates written out.

Measured (`tests/clients/harness.py run_client`, the helper hunt49g, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy predicted
= measured, no kernel scratch at these peaks):
- CoCa default (2 steps): 631,334 B; `checkpoint:@ParallelTransformerBlock` 475,046 B
  (507,878 B predicted before Note [A cache a later call saves again]),
  `checkpoint:unimodal_layers.*` 544,870 B, `offload:multimodal_layers.*.*` 507,886 B,
  `selective:@CrossAttention` 621,070 B, `checkpoint:@Residual` 441,494 B;
  `selective:@ParallelTransformerBlock` refused by both (predicted 623,462 B before
  Note [A cache kept as a plain attribute]). `--pad --amp`: 512,502 B + 5,272 B of bf16
  kernel scratch = 517,774 B.
- IPA `--mode structure --mask` (1 step): 253,248 B; `checkpoint:blocks.*` 210,400 B,
  `selective:@IPABlock` 242,920 B, `offload:blocks.0+checkpoint:blocks.1.attn` 199,560 B.
The doctor finds nothing on either loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("coca_pytorch") is None or \
        importlib.util.find_spec("invariant_point_attention") is None:
    pytest.skip("CoCa-pytorch or invariant-point-attention is not installed",
                allow_module_level=True)
pytestmark = pytest.mark.clients


def test_cocas_cached_masks_are_priced_per_step_and_refuse_selective():
    """One unimodal and one multimodal layer, half the captions padded, 2 steps: the
    blocks' cached mask is saved again by step 2's call. Checkpointing both blocks was
    predicted with step 1's frames (RNG state and block input) held to step 2's backward;
    selective on them was predicted while torch's selective checkpoint meets the re-run's
    slice of the cached mask. Both now as measured; the doctor finds nothing."""
    argv = ["--uni", "1", "--multi", "1", "--pad"]
    pols = {"checkpoint:@ParallelTransformerBlock": 329_997,
            "offload:multimodal_layers.*.*+selective:img_attn_pool": 345_829}
    sel = "selective:@ParallelTransformerBlock"
    run = run_client("train_coca.py", argv, [*pols, sel])
    assert run.ledger_peak == run.allocator_peak == 404_173
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    refused = run.policies[sel]
    assert refused.predicted is None and refused.measured is None
    assert "multimodal_layers.0.0.fn (a plain attribute)" in refused.predict_refusal
    assert_one_doctor_error("train_coca.py", argv, 2, None, "")


def test_ipa_structure_module_is_predicted_as_measured():
    """Two IPA blocks updating masked residues' frames (quaternions composed, translations
    moved along detached rotations), 1 step: a policy on each block, selective on the
    blocks, and a mix (offload one block, checkpoint the other's attention)."""
    pols = {"checkpoint:blocks.*": 210_400, "selective:@IPABlock": 242_920,
            "offload:blocks.0+checkpoint:blocks.1.attn": 199_560}
    run = run_client("train_ipa.py", ["--mode", "structure", "--mask"], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 253_248
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
