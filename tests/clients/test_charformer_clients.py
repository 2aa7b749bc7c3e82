"""charformer-pytorch (tests/clients/train_charformer.py): lucidrains' GBST (gradient-based
subword tokenization: byte embeddings, a depthwise conv, block means over several block
sizes, each block size a clone of the sequence padded for its offset, scored and mixed by
a softmax, a consensus attention over the scores, a mean-pooled downsample) feeding an
`nn.TransformerEncoder` of our own; a masked byte loss (`--mode mlm`) and a byte
classifier (`--mode cls`).

Measured (`tests/clients/harness.py run_client`, the helper hunt48k, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; no kernel scratch, ledger = allocator,
every policy predicted = measured):
- `--mode mlm --mask --blocks offsets` (1 step, the test): 346,892 B;
  `checkpoint:tokenizer` 288,568 B, `offload:encoder.layers.*` 303,884 B,
  `selective:@GBST` 306,160 B, `offload:tokenizer` 259,440 B (what `plan` picks at
  300,000 B, the helper hunt49j). 2 steps: 451,348 B; `checkpoint:tokenizer` 395,084 B,
  `offload:tokenizer` 363,896 B, `selective:tokenizer` 410,616 B, `checkpoint:encoder.
  layers.*` 422,676 B, `offload:encoder.layers.*` 408,340 B.
- `--mode cls` (2 steps): 292,344 B; `offload:tokenizer` 268,344 B, `checkpoint:
  tokenizer` 295,096 B (over the baseline), `offload:@DepthwiseConv1d`
  276,216 B. With `--mask`: 300,180 B; with `--mask --amp`: 298,548 B.
The doctor finds nothing on the loop; with `--accum 2` on `mlm` it warns (rightly) that
the two micro-batches' means are over different numbers of masked bytes.
"""

import importlib.util

import pytest

from memledger.replay.plan import plan
from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("charformer_pytorch") is None:
    pytest.skip("charformer-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_gbst_masked_byte_model_is_predicted_as_measured():
    """GBST with offset blocks and a padding mask (its masked means fill a view of each
    block size's clone in place, and its block scores are masked before the softmax)
    under a two-layer encoder and a masked byte loss: a policy on the tokenizer, on the
    encoder's layers and selective on the GBST class, each predicted and measured to the
    byte; the doctor finds nothing on its loop."""
    argv = ["--mode", "mlm", "--mask", "--blocks", "offsets"]
    pols = {"checkpoint:tokenizer": 288_568,
            "offload:encoder.layers.*": 303_884,
            "selective:@GBST": 306_160,
            "offload:tokenizer": 259_440}
    run = run_client("train_charformer.py", argv, list(pols), steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.ledger_peak == run.allocator_peak == 346_892
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    # plan searches the tokenizer beside the encoder's layers (Note [Modules that are not
    # blocks], replay/lone_modules.py): at 300,000 B, under anything the layers reach
    # (303,884 B), it said "no candidate fits" before
    rep = plan(run.ledger, 300_000, front_points=0)
    assert (rep.policy, rep.predicted_peak_bytes) == ("offload:tokenizer", 259_440)
    assert rep.modules == ["tokenizer"]
    assert_one_doctor_error("train_charformer.py", argv, 2, None, "")
