"""pytorch-frame (tests/clients/train_frame.py): a DataFrame of numerical and categorical
columns materialized into a `TensorFrame` (its batch a dict of tensors by stype, in an
object), batched by torch_frame's `DataLoader`, and Trompt built from config: per layer a
`StypeWiseFeatureEncoder` of the batch and a `TromptConv` over the prompts, one
`TromptDecoder` called once per layer, a loss over every layer's prediction (as the
library's examples/trompt.py trains it). The script keeps one bare `LinearEncoder()` it
hands to no model (the models that take a numerical encoder get it).

Measured (`tests/clients/harness.py run_client`, the helper hunt52c, 2026-12-07, torch
2.13.0 CPU, this session's AMD EPYC at one intra-op thread; ledger = allocator, every
policy predicted = measured; docs/accuracy.md "pytorch-frame" for the other models):
- `--model trompt` (1 step): 116,384 B; `checkpoint:trompt_convs.*` 101,816 B,
  `checkpoint:trompt_decoder` 119,520 B, `offload:encoders.*` 103,968 B.
- `--model ft --multi --emb --time` (2 steps): 457,824 B; `checkpoint:backbone.
  transformer.layers.*` 276,240 B, `selective:@TransformerEncoderLayer` 349,968 B.
Before this session the trace died at the first optimizer step on every model but ft,
resnet and mlp (exit 70: the walk for modules never called met the bare encoder, whose
`named_modules` raises "not fully-specified yet"), and the batch inside the TensorFrame
read `temporary` (the 16 x 3 numbers and 16 x 2 categories), only the target `input`.
The doctor finds nothing on this loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torch_frame") is None:
    pytest.skip("pytorch-frame is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_trompt_on_a_tensor_frame_is_predicted_as_measured_and_its_batch_is_input():
    """Policies on the convolutions, on the decoder called once per layer, and offload on
    the per-layer encoders, each predicted and measured to the byte; the batch handed in
    the TensorFrame is `input`: 16 x 3 fp32 numbers (192 B), 16 x 2 int64 categories
    (256 B) and the 16 int64 targets (128 B)."""
    argv = ["--model", "trompt"]
    pols = {"checkpoint:trompt_convs.*": 101_816, "checkpoint:trompt_decoder": 119_520,
            "offload:encoders.*": 103_968}
    run = run_client("train_frame.py", argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 116_384
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    st = run.ledger.storages
    assert sorted(st.loc[st["category"] == "input", "bytes"]) == [128, 192, 256]
    assert run.ledger.at_peak()["input"] == 16 * 3 * 4 + 16 * 2 * 8 + 16 * 8 == 576
    assert_one_doctor_error("train_frame.py", argv, 2, None, "")
