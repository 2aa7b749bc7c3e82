"""conformer and nystrom-attention (tests/clients/train_speech.py): lucidrains' Conformer
blocks (half-step feed-forwards, relative-position attention with a boolean frame mask, a
convolution module of pointwise conv, GLU, depthwise conv, BatchNorm and Swish) under a
CTC head, and the Nystromformer (landmark attention, an iterated Moore-Penrose
pseudo-inverse, a depthwise-conv residual of the values, a frame mask that pads the
sequence at the front to a multiple of the landmarks) classifying utterances.

Measured (`tests/clients/harness.py run_client`, the helper hunt48f, 2026-12-06, torch
2.13.0 CPU, AMD EPYC (AVX2); ledger + kernel scratch = allocator, every policy predicted
= measured; docs/accuracy.md "conformer and nystrom-attention" has the rest):
- `--model conformer --mask --head ctc --frames 24 --sgd` (1 step): 456,256 B;
  `checkpoint:encoder.stack.layers.*` 349,360 B, `offload:encoder.stack.layers.1+
  selective:encoder.stack.layers.0.conv` 355,096 B, `checkpoint:@Attention` 381,448 B.
- `--model nystrom --mask --frames 14 --sgd` (1 step): ledger 136,016 B, + 2,944 B of the
  residual conv's kernel scratch (CPU-dependent) = allocator; `checkpoint:@NystromAttention`
  134,016 B, `offload:encoder.stack.layers.*.*` 80,764 B; `selective:` on the layers
  refused by both (the masked similarities are filled in place).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("conformer") is None or \
        importlib.util.find_spec("nystrom_attention") is None:
    pytest.skip("conformer or nystrom-attention is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

C = "encoder.stack.layers"


def test_a_conformer_ctc_recognizer_is_predicted_as_measured():
    """Masked Conformer blocks under F.ctc_loss: checkpoint on every block, a mix (offload
    on one block, selective on the other's convolution module, with its training
    BatchNorm) and checkpoint on the attentions, each to the byte; the doctor finds
    nothing on its loop."""
    argv = ["--model", "conformer", "--mask", "--head", "ctc", "--frames", "24", "--sgd"]
    pols = {f"checkpoint:{C}.*": 349_360,
            f"offload:{C}.1+selective:{C}.0.conv": 355_096,
            "checkpoint:@Attention": 381_448}
    run = run_client("train_speech.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 456_256
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_speech.py", argv, 1, None, "")


def test_a_masked_nystromformer_is_predicted_as_measured():
    """Nystromformer layers with a frame mask (14 frames padded to 16 for 4 landmarks):
    checkpoint on the attentions and offload on every sublayer, predicted = measured;
    selective refused by both sides alike. The residual conv leaves kernel scratch at the
    peak, so the allocator is compared with the ledger plus its scratch, and the
    policies' bytes are not pinned (they are below the scratch's peak here)."""
    argv = ["--model", "nystrom", "--mask", "--frames", "14", "--sgd"]
    pols = ["checkpoint:@NystromAttention", f"offload:{C}.*.*", f"selective:{C}.*.*"]
    run = run_client("train_speech.py", argv, pols, steps=1)
    assert run.ledger_peak == 136_016
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy in pols[:2]:
        p = run.policies[policy]
        assert p.predicted == p.measured is not None and p.measured < run.allocator_peak
    sel = run.policies[pols[2]]
    assert sel.predicted is sel.measured is None
    assert "changed in place afterwards" in sel.predict_refusal
    assert sel.predict_refusal == sel.measure_refusal
