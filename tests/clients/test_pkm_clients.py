"""product-key-memory (tests/clients/train_pkm.py): the library's own `Transformer` with a
`PKM` layer in place of the first feed-forward (product keys, top-k over each half's
sub-keys, an `EmbeddingBag` of values under the softmaxed scores), Adam on the README's
two parameter groups (`fetch_optimizer_parameters`: the values at lr 1e-2), clipping, a
no_grad validation loss and a `generate` sample each step.

Measured (`tests/clients/harness.py run_client`, the helper hunt47h, 2026-12-06, torch
2.13.0 CPU, tiny shapes: dim 16, sequence 16, 8 x 8 memories, top-4, 32 tokens, 2 steps;
L = layers):
- default: 177,728 B (ledger = allocator); `checkpoint:L.*.1` 178,488 B,
  `selective:L.*.1` 178,488 B, `offload:L.*.1` 151,104 B,
  `checkpoint:L.0.0+offload:L.1.*+selective:L.0.1` 171,000 B, all predicted = measured;
  `checkpoint:L.*` refused by both (a ModuleList, no forward of its own).
- `--concat` (`concat_values_and_combine`): 151,396 B; the four policies exact
  (176,556 / 178,604 / 141,748 / 171,116 B). The doctor warns, rightly, that the PKM's
  keys, query projection and norm get no gradient: that mode sums the values without the
  scores (`self.values(value_indices)`, no `per_sample_weights`), so the top-k's scores
  never reach the loss (the library's, not ours).
- `--difftopk` (CoLT5's coordinate-descent top-k): 364,424 B; four policies exact.
  `--batchnorm --dropout 0.1` (MaskedBatchNorm1D writing normed rows back in place):
  186,952 B; four exact. `--concat --gumbel 0.5 --mem-mask`: 172,196 B; four exact.
- The doctor finds nothing on default, `--difftopk`, `--batchnorm`, `--sparse`.
- `--sparse --accumulate 2 --depth 1` (the values' EmbeddingBag sparse, SparseAdam, two
  backward passes a step): 156,612 B against the allocator's 174,036 B before Note
  [Sparse parts replaced inside an op] (trace/collector.py), equal after; pinned in plain
  torch by tests/clients/test_sparse_accum.py. `--sparse --validate-every 1 --accumulate
  2`: 225,076 B; `checkpoint:L.*.1` and `selective:L.*.1` 230,132 B, `offload:L.*.1`
  207,632 B, the mix 222,644 B, exact since Note [A sparse gradient's part ends no
  backward] (replay/engine.py; before: checkpoint predicted 233,140 B, the region's RNG
  state held to the optimizer's step), pinned by test_sparse_accum.py too.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("product_key_memory") is None:
    pytest.skip("product-key-memory is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_the_readme_loop_with_its_parameter_groups():
    """The README's two Adam groups, a validation loss and a sample each step: ledger =
    allocator, two policies predicted = measured, the doctor clean."""
    argv = ["--validate-every", "1"]
    pick = "checkpoint:layers.0.0+offload:layers.1.*+selective:layers.0.1"
    run = run_client("train_pkm.py", argv, ["offload:layers.*.1", pick], steps=2)
    assert run.ledger_peak == run.allocator_peak == 177_792
    got = {k: (p.predicted, p.measured) for k, p in run.policies.items()}
    assert got == {"offload:layers.*.1": (151_168, 151_168), pick: (171_064, 171_064)}
    assert_one_doctor_error("train_pkm.py", argv, 2, None, "")
