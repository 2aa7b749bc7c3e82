"""native-sparse-attention-pytorch (tests/clients/train_nsa.py): lucidrains' Native Sparse
Attention, each layer's `SparseAttention` three branches gated per head: compressed
(`Unfold` windows through an MLP), selected (top-k blocks of the compressed scores, keys
and values repeated to every query and `gather`ed, masks built per call) and sliding
window (local-attention); the library's `Transformer` as its enwik8 train.py trains it.

Measured (`tests/clients/harness.py run_client`, the helper hunt50c, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator with its kernel
scratch, every policy predicted = measured, `trace --fake --device cpu` = the real ledger):
- default (2 steps): 922,144 B + 3,832 B of kernel scratch = 925,976 B; `checkpoint:
  layers.*.0` 830,208 B, `offload:layers.*.*` 798,184 B, `selective:@SparseAttention`
  863,744 B. 512 KiB of it are the two layers' rotary `cached_freqs` (8192 x 8 float32),
  so `plan --budget 80%` rightly finds nothing that fits (lowest 798,184 B).
- `--kv-heads 1` 855,960 B, `--no-share --kv-heads 1` 901,272 B, `--stride 2` 957,848 B,
  `--seq-len 15` 921,720 B, `--seq-len 3` 710,308 B, `--selected 0` 827,192 B, `--compress
  grouped / conv / pool / single / transformer` 999,896 / 881,848 / 882,280 / 854,888 /
  1,102,968 B, `--amp` 836,024 + 19,280 B, `--accum 2 --validate` 970,376 B, `--generate 3
  --cache` 926,128 B, `--mode attn` 440,292 B: each with 4 policies, all exact.
- `--flex-eval --validate` (validation through flex_attention): before, trace failed (exit
  3, Note [Higher-order operators run by their ops]); now 922,144 B ledger, the
  allocator's 936,216 B the compiled `create_block_mask` (show says so).
`compare` passes every policy bitwise (within rtol 1e-5 on `--flex-eval`, a baseline that
compiled); the doctor finds nothing on the loop, and with
`--seq-len 3` (shorter than a compression block) warns, rightly, that the four intra-block
position parameters got no gradient.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("native_sparse_attention_pytorch") is None:
    pytest.skip("native-sparse-attention-pytorch is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_native_sparse_attention_with_grouped_queries_and_a_gated_top_k_is_exact():
    """One key / value head for two query heads (the selection shared by the group), the
    differentiable top-k (`use_diff_topk`: the selected scores gate the gathered keys): a
    policy on every sparse attention, offload on every layer's parts, and a mix
    (checkpoint on the sliding-window branch, offload on the feed-forwards), each predicted
    and measured to the byte; both layers save alike; the doctor finds nothing."""
    argv = ["--kv-heads", "1", "--diff-topk"]
    pols = {"checkpoint:layers.*.0": 718_316, "offload:layers.*.*": 701_620,
            "checkpoint:layers.*.0.sliding_window+offload:layers.*.1": 778_284}
    run = run_client("train_nsa.py", argv, list(pols), steps=1)
    assert run.ledger_peak == 796_940
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=800_000)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predicted == p.measured
        assert_pinned(p.measured, avx2=peak)
    blocks = run.summary.activations.by_block
    assert blocks["layers.0"] == blocks["layers.1"]
    assert_one_doctor_error("train_nsa.py", argv, 2, None, "")
