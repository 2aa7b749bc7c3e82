"""PoPE-pytorch (tests/clients/train_pope.py): polar positional embeddings in attention
(`PoPE`: frequencies per position and a learned per-head key bias clamped to [-2 pi, 0];
`apply_pope_to_qk` turns q and k into softplus magnitudes rotated by cos / sin halves,
twice the rotated width) in a small causal language model, and `AxialPoPE` over a 2-D
patch grid (its inverse frequencies frozen Parameters). PoPE-pytorch 0.2.1, the pure-torch
paths (its Triton kernels are CUDA only).

Measured (`tests/clients/harness.py run_client`, the helper hunt55c, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, a bf16 CPU; ledger = allocator with no kernel scratch, every
policy predicted = measured, `--fake --device cpu` the same ledger and predictions):
- `--attn sdpa` (2 steps): 623,752 B; `checkpoint:blocks.*` 622,024 B, `selective:blocks.*`
  624,072 B, `offload:blocks.*` 617,724 B, `checkpoint:@Attention` 623,240 B,
  `offload:blocks.0+checkpoint:blocks.1` 617,724 B, `checkpoint:pope` 628,808 B.
- `--attn manual --kv-heads 1`: 564,432 B; `checkpoint:blocks.*` 558,536 B,
  `selective:@Block` 560,584 B, `offload:blocks.*.attn` 552,188 B,
  `checkpoint:blocks.0.ff+offload:blocks.1` 553,104 B.
- `--attn mixed`: 641,312 B; `checkpoint:blocks.*` 630,768 B, `selective:blocks.*`
  632,816 B, `offload:blocks.1.attn` 624,912 B.
- `--attn axial`: 751,432 B; `checkpoint:blocks.*` 673,672 B, `selective:@Block`
  681,416 B, `offload:blocks.*` 605,128 B, `checkpoint:pope` 756,488 B.
- `--attn sdpa --rotate 16 --mask --kv-heads 1 --accum 2 --clip --validate --optim sgd`:
  531,164 B; `checkpoint:blocks.*` 483,180 B, `selective:@Attention` 500,972 B,
  `offload:blocks.*` 424,292 B.
`compare` ADOPTs `offload:@Attention` on `--attn sdpa`, every gate passed; the doctor finds
nothing on the loops and one `zeroed_before_step` error with `--bug zero-late`. No bug of
memledger's found here; two of the library's (docs/decisions.md, fifty-fifth session).
"""

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client, skip_without

skip_without("PoPE_pytorch")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_mixed_positions_and_axial_pope_are_predicted_as_measured():
    """`--attn mixed`: every other position rotated (the others' frequencies padded with
    zeros, `torch.where` between rotated and unrotated similarities); `--attn axial`:
    AxialPoPE over a 4 x 4 grid, non-causal SDPA. Ledger = allocator; checkpoint, selective
    and offload each predicted to the byte."""
    pols = {"checkpoint:blocks.*": 630_768, "offload:blocks.1.attn": 624_912}
    run = run_client("train_pope.py", ["--attn", "mixed"], list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 641_312
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    pols = {"selective:@Block": 681_416, "offload:blocks.*": 605_128}
    run = run_client("train_pope.py", ["--attn", "axial"], list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 751_432
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_the_doctor_finds_gradients_zeroed_before_the_step():
    """`--bug zero-late`: `optim.zero_grad()` between backward and step: one
    `zeroed_before_step` error at the step's line; nothing on the loop as written."""
    assert_one_doctor_error("train_pope.py", ["--attn", "manual", "--bug", "zero-late"], 2,
                            "zeroed_before_step", "optim.step()")
    assert_one_doctor_error("train_pope.py", ["--attn", "sdpa", "--accum", "2", "--clip"], 2,
                            None, "")
