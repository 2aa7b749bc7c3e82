"""slot_attention (tests/clients/train_slot_attention.py): lucidrains' `SlotAttention`
(slots drawn by `torch.randn` in every forward, `iters` rounds of attention sharing one
`nn.GRUCell` and a residual MLP with an in-place ReLU), `MultiHeadSlotAttention`, and the
`AdaptiveSlotWrapper` (a straight-through Gumbel keep mask, its noise by `rand_like`),
behind a tiny CNN encoder, decoded by a spatial broadcast MLP to an MSE reconstruction.

Measured (`tests/clients/harness.py run_client`, the helper hunt49m, 2026-12-07, torch
2.13.0, an AVX2 CPU, one intra-op thread; ledger = allocator, no kernel scratch, every
policy predicted = measured):
- `--adaptive` (1 step): 349,284 B; `checkpoint:slot_attn` 287,076 B, `offload:@GRUCell`
  338,532 B; `selective:slot_attn.slot_attn` refused alike by predict and measure (the MLP's
  addmm output is changed by the in-place ReLU). 2 steps: 414,596 B; `checkpoint:slot_attn`
  352,388, `checkpoint:slot_attn.slot_attn.gru` 420,548, `offload:slot_attn.slot_attn.mlp`
  409,988, `checkpoint:decoder+offload:encoder` 409,924, `offload:@GRUCell` 403,844 B.
- `--heads 2 --adaptive --validate` (2 steps): 472,332 B; `checkpoint:slot_attn` 355,660,
  `selective:slot_attn.slot_attn` 403,340 (the multi-head MLP's ReLU is not in place),
  `offload:slot_attn.slot_attn` 342,988, `selective:slot_attn.slot_attn.mlp` 489,036 B.
- `--iters 2` (2 steps): 400,080 B; `checkpoint:@SlotAttention` 351,952,
  `checkpoint:slot_attn.mlp` 408,144, `selective:slot_attn.mlp.0` 410,192 B.
`--fake` ledgers equal the real ones; `compare` passes `checkpoint:slot_attn` (the slots'
`randn` and the Gumbel noise replayed by checkpoint's RNG state) bitwise; the doctor finds
nothing on the loop (with `--validate`).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("slot_attention") is None:
    pytest.skip("slot_attention is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_adaptive_slot_attention_is_predicted_as_measured_and_its_inplace_relu_refused_alike():
    """The adaptive wrapper over the plain `SlotAttention`, 1 step: checkpoint on the whole
    slot module (its `randn` slots re-drawn alike in the re-run) and offload on the shared
    GRU cell (called once per round) predicted and measured to the byte; selective on the
    slot module refused by both sides with the same reason, since the MLP's `ReLU(inplace=
    True)` changes the addmm output selective would keep. The doctor finds nothing."""
    argv = ["--adaptive"]
    pols = {"checkpoint:slot_attn": 287_076, "offload:@GRUCell": 338_532}
    sel = "selective:slot_attn.slot_attn"
    run = run_client("train_slot_attention.py", argv, [*pols, sel], steps=1)
    assert run.ledger_peak == run.allocator_peak == 349_284
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    refused = run.policies[sel]
    assert refused.predicted is None and refused.measured is None
    assert "changed in place" in refused.predict_refusal
    assert refused.predict_refusal == refused.measure_refusal
    assert_one_doctor_error("train_slot_attention.py", argv, 2, None, "")
