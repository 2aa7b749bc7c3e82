"""simple-hierarchical-transformer (tests/clients/train_sht.py): lucidrains' multi-resolution
causal LM, token embeddings compressed per hierarchy by a causal strided convolution, each
hierarchy's `HierarchicalBlock` (axial attention, full with xpos rotary embeddings or
local-windowed, then a feed-forward, behind token shifts) merged into the predicting one,
trained on next-token cross-entropy plus its next-latent (chunk summarizer, latent
dynamics, rolled out) and reconstruction losses; Adam.

Measured (`tests/clients/harness.py run_client`, the helper hunt48e, 2026-12-06, torch
2.13.0 CPU, AMD EPYC AVX2; ledger = allocator, every policy predicted = measured unless
said):
- defaults (`--hier 1,2`, 2 steps): 2,606,896 B (2 MiB of it the rotary embeddings'
  8192-row caches); `checkpoint:@HierarchicalBlock` 2,498,608 B, `checkpoint:compressors.*`
  2,593,392 B, `offload:@Attention+selective:@FeedForward` 2,523,184 B,
  `checkpoint:latent_dynamics.*` 2,587,880 B; `checkpoint:hierarchical_merges.*` refused
  alike (the list of hierarchy tokens is changed after the merge returns).
- `--hier 1,2,4 --windows none,4,0 --stride 1,2,2 --merge-all --predict-all --rollouts 2
  --no-detach`: 1,959,664 B; `checkpoint:layers.*.*` and `offload:@HierarchicalBlock`
  1,901,680 B, `checkpoint:@LocalMHA` 1,951,424 B, `selective:layers.*.*.ff` 1,964,400 B,
  `offload:chunk_summarizers.*` 1,959,536 B. Fake ledgers = real ones.
- `--hier 1,2 --windows none,4 --rollouts 2 --depth 1` (1 step): 804,372 B;
  `checkpoint:@HierarchicalBlock` 757,576 B, `offload:@Attention+selective:@FeedForward`
  779,924 B, `checkpoint:latent_dynamics.*` 768,404 B.
- `--hier 1,2 --windows none,0 --depth 1 --seq-len 8` (2 steps, the test): 756,288 B;
  749,788, 750,400 and 757,000 B as the test pins. At 1 step the peak is Adam's first step
  (740,424 B + 12 B of kernel scratch = 740,436 B allocator), which no policy moves.
Left: `selective:` on a whole `HierarchicalBlock` with full attention is refused by predict
(the block's first call makes `Attend.mask` and fills the rotary caches; later calls reuse
them) and run by measure (docs/decisions.md, "simple-hierarchical-transformer").
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("simple_hierarchical_transformer") is None:
    pytest.skip("simple-hierarchical-transformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_a_hierarchical_transformer_is_predicted_as_measured():
    """Two hierarchies (1x with full attention, 2x a feed-forward alone), one layer, 8
    tokens: checkpoint on every block, offload on the attention mixed with selective on
    every feed-forward, checkpoint on the latent dynamics (it raises the peak: its re-run
    lands there), each predicted and measured to the byte; the doctor finds nothing on
    its loop. On this session's AVX2 box no kernel scratch falls at these peaks; the
    ledger is held to the allocator with its scratch, so a CPU whose kernels leave some
    there still passes the first assertion."""
    argv = ["--hier", "1,2", "--windows", "none,0", "--depth", "1", "--seq-len", "8"]
    # the block's re-run peak moves with the intra-op threads (744,256 B at one, 749,788 B
    # at two, on AVX2; the suite's workers run one): held to predicted = measured (Note
    # [Numbers that depend on the CPU], tests/clients/harness.py)
    pols = {"checkpoint:@HierarchicalBlock": None,
            "offload:@Attention+selective:@FeedForward": 750_400,
            "checkpoint:latent_dynamics.*": 757_000}
    run = run_client("train_sht.py", argv, list(pols))
    assert run.ledger_peak == 756_288
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert peak is None or run.policies[policy].measured == peak
    assert_one_doctor_error("train_sht.py", argv, 2, None, "")
