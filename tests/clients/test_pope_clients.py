"""PoPE-pytorch 0.2.1 (tests/clients/train_pope.py): polar coordinate positional embeddings
in a tiny causal LM written as the library's README uses them (`PoPE(dim, heads=...)`
called with the sequence length, `apply_pope_to_qk` on each attention's queries and keys,
its non-fused `compute_attn_similarity` and `flash_attn_with_pope` on CPU), and a
classifier over a 4 x 4 grid with `AxialPoPE`.

Measured (`tests/clients/harness.py run_client`, the helper hunt55a, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, an AMD CPU with AVX-512 bf16; ledger (+ kernel scratch) = allocator, every
policy predicted = measured, `--fake --device cpu` the same ledger; docs/accuracy.md
"PoPE-pytorch" for the other configurations):
- `--attn complex` (2 steps): 827,272 + 4,096 B of kernel scratch (AMD, AVX-512 bf16) =
  831,368 B; `checkpoint:blocks.*` 745,152 B, `selective:@Attention` 782,088 B,
  `offload:blocks.*` 700,672 B, `checkpoint:pope` 836,424 B.
No product bug was found on it; the doctor finds nothing on the loop.
"""

import pytest

from tests.clients.harness import assert_pinned, run_client, skip_without

skip_without("PoPE_pytorch")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_complex_polar_queries_and_keys_are_predicted_as_measured():
    """`apply_pope_to_qk(..., return_complex=True)`: complex64 queries and keys by
    `torch.polar`, a similarity from the real part of an einsum with the keys' conjugate;
    checkpoint, selective and offload of the blocks
    predicted and measured to the byte."""
    pols = {"checkpoint:blocks.*": 745_152, "selective:@Attention": 782_088,
            "offload:blocks.*": 700_672}
    run = run_client("train_pope.py", ["--attn", "complex"], list(pols), steps=2)
    assert run.ledger_peak == 827_272
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=831_368)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)
