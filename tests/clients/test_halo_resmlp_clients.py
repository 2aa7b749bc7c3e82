"""halonet-pytorch and res-mlp-pytorch (tests/clients/train_halo_resmlp.py): a small image
classifier of our own blocks around halonet-pytorch's `HaloAttention` (the image cut into
blocks by an einops rearrange, keys and values from each block with its halo gathered by
`F.unfold`, relative position logits added in place to the similarities, the padding
masked by `masked_fill_`), BatchNorm and a 1x1-conv MLP per block; and res-mlp-pytorch's
`ResMLP` as its README builds it, a top-level `nn.Sequential` of a patch Rearrange, a
Linear, blocks of two `PreAffinePostLayerScale` (an `Affine`, a `Conv1d` over the patches
or a Linear-GELU-Linear, a layer scale), an `Affine`, a `Reduce` mean pool and a head.

Measured (`tests/clients/harness.py run_client`, the helper hunt49f, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy
predicted = measured or refused by both):
- `--model halo` (1 step): 473,872 B; `checkpoint:blocks.0+offload:blocks.1.attn`
  312,672 B, `offload:blocks.*` 275,680 B; `selective:@HaloAttention` and
  `selective:blocks.*` refused alike (the similarities, a bmm's output, are changed in
  place by `sim += ...` and `masked_fill_`). 2 steps: 516,840 B; `checkpoint:blocks.*`
  359,488, `offload:blocks.*` 318,652, `checkpoint:@HaloAttention` 429,424,
  `selective:blocks.*.mlp` 513,704 B. `--heads 1 --norm gn --size 12 --halo 2 --batch 4`
  (1 step): 2,007,400 B; `checkpoint:blocks.*` 1,259,432, `offload:blocks.*` 1,112,280 B.
- `--model resmlp --depth 1 --sgd` (2 steps): 42,400 B; `checkpoint:3` (the last Affine)
  46,432 B, `selective:@Affine` 56,544 B, `offload:2` 40,816 B. The Affine's multiply
  saves only its argument and `g`, so its re-run stops before its first op, and the peak
  is the generator state that re-run forks: predicted 42,676 and 52,788 B before Note [A
  re-run that stops before its first op] (replay/engine.py). `--model resmlp` (depth 2,
  2 steps): 96,156 B + 12 B of kernel scratch = 96,168 B allocator.
The doctor finds nothing on either loop (`--validate`, `--accum 2`, `--amp`, `--sgd`).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("halonet_pytorch") is None or \
        importlib.util.find_spec("res_mlp_pytorch") is None:
    pytest.skip("halonet-pytorch or res-mlp-pytorch is not installed",
                allow_module_level=True)
pytestmark = pytest.mark.clients

S = "train_halo_resmlp.py"


def test_halo_attention_blocks_are_predicted_as_measured():
    """Two blocks of HaloAttention (4 x 4 blocks, halo 1, 2 heads) over 8 x 8 images, one
    step: a mix (checkpoint on the first block, offload on the second's attention) and
    offload on both blocks, each predicted and measured to the byte; selective on the
    attentions refused by both sides in the same line. The doctor finds nothing."""
    argv = ["--model", "halo"]
    pols = {"checkpoint:blocks.0+offload:blocks.1.attn": 312_672,
            "offload:blocks.*": 275_680,
            "selective:@HaloAttention": None}
    run = run_client(S, argv, list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 473_872
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    refused = run.policies["selective:@HaloAttention"]
    assert refused.predict_refusal == refused.measure_refusal
    assert "bmm's output in blocks.1.attn that is changed in place" in refused.measure_refusal
    assert_one_doctor_error(S, argv, 2, None, "")


def test_a_resmlp_affine_rerun_forks_the_generator_state():
    """ResMLP (depth 1, SGD, 2 steps): checkpoint on its last Affine and selective on every
    Affine peak where torch's re-run forks the CPU generator state at the multiply's
    unpack, with nothing re-made; predicted 3,756 B under measured before (Note [A re-run
    that stops before its first op]). Offload on the block is exact either way."""
    argv = ["--model", "resmlp", "--depth", "1", "--sgd"]
    pols = {"checkpoint:3": 46_432, "selective:@Affine": 56_544, "offload:2": 40_816}
    run = run_client(S, argv, list(pols))
    assert run.ledger_peak == run.allocator_peak == 42_400
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
