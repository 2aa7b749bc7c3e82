"""transfusion-pytorch (tests/clients/train_transfusion.py): lucidrains' Transfusion, one
transformer over interleaved text tokens and continuous modality tokens, the next-token
loss beside a flow-matching loss, causal attention for text and bidirectional attention
inside each modality (the mask built per batch from where the modalities sit), adaptive
layer norms conditioned on each modality's time, and images through a `Conv2d` encoder the
model runs frozen (Adam).

Measured (`tests/clients/harness.py run_client`, the helper hunt51a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger with its kernel scratch = allocator,
every policy predicted = measured; `--processing hybrid` unless said, 2 steps):
- `--mode one --processing auto` (the library's default, CLI): 968,626 B + 17,698 B of
  scratch = 986,324 B; `checkpoint:transformer` 935,686 B. In one process (the harness
  before it cleared the library's router) 72 B apart.
- `--mode one`: 963,370 + 17,770 B; `checkpoint:transformer.layers.*.1` 843,668 B,
  `offload:transformer.layers.*.2` 908,084 B, `checkpoint:transformer` 930,430 B
  (`--processing grouped`: 843,596, 908,012, 930,430 B; scratch 17,698 B).
  `checkpoint:transformer.layers.*.3` (the attention residual, handed the growing
  `hiddens` list) refused by both.
- `--mode two`: 1,004,006 B; `checkpoint:transformer.layers.*.1` 858,982 B,
  `selective:@FeedForward` 996,646 B, `checkpoint:transformer.layers.0.2+offload:
  transformer.layers.1.1` 893,510 B.
- `--mode image --recon 0.5`: 1,369,288 B; `checkpoint:transformer.layers.*.2` 1,262,280 B,
  `selective:@Attention` 1,232,840 B; `offload:modality_decoder.*` refused by both (it never
  runs in training).
- `--mode text`: 766,166 B; `--ema`: 1,426,521 B; `--accum 2 --validate --breakdown
  --value-residual`: 1,083,624 B; `--pos-emb --mode image`: 1,418,148 B (each with 3-4
  policies, predicted = measured). `trace --fake --device cpu` = the real ledger on six.
The doctor finds nothing on the text, one- and two-modality loops; on the image loop
(`model.parameters()` to Adam) it warns that the frozen encoder gets no gradient (it said
so as an error, "run this part of the forward with grad enabled", before Note [A part the
model runs frozen], trace/doctor_probe.py) and that the decoder never runs.
"""

import importlib.util

import pytest

from tests.clients.harness import HERE, assert_pinned, run_client

if importlib.util.find_spec("transfusion_pytorch") is None:
    pytest.skip("transfusion-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

L = "transformer.layers"


def test_a_transfusion_on_images_is_predicted_as_measured_and_its_frozen_encoder_warns():
    """The README's image Transfusion, tiny (dim 16, depth 2, latents of 8, a Conv2d
    encoder and decoder), the modalities laid out by one fixed strategy (the default
    `auto` picks by the clock): a checkpoint of every block's attention, offload of every
    feed-forward, selective on the attentions, each predicted and measured to the byte.
    The doctor warns (no error) that the encoder the model runs in eval under no_grad gets
    no gradient, and that the decoder (used only when sampling) never runs."""
    from memledger.doctor.run import diagnose_in_process

    argv = ["--mode", "image", "--processing", "hybrid"]
    # with their kernel scratch (31,618 B at the peak; ops that take scratch differ by CPU)
    pols = {f"checkpoint:{L}.*.1": 875_608, f"offload:{L}.*.2": 1_050_072,
            "selective:@Attention": 1_042_008}
    run = run_client("train_transfusion.py", argv, list(pols), steps=1)
    assert run.ledger_peak == 1_146_838
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=1_178_456)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    report, outcome = diagnose_in_process(HERE / "train_transfusion.py", argv, 2)
    assert outcome.code == 0, outcome.reason
    found = sorted((f.check, f.severity) for f in report.findings)
    assert found == [("cut_graph", "warning"), ("unused_parameter", "warning")], \
        [f.line() for f in report.findings]
