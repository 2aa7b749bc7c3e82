"""taylor-series-linear-attention (tests/clients/train_taylor.py), used directly:
`TaylorSeriesLinearAttn` (exp(q.k) by its second-order Taylor expansion, a linear attention
over 1 + d + d^2 features) in a token classifier with its options, the library's `ViT`
(a depthwise conv in each feed-forward), `ChannelFirstTaylorSeriesLinearAttn` in a small
conv net. taylor-series-linear-attention 0.2.0; its causal attention needs pytorch-fast-
transformers (a CUDA extension): without it the library calls `exit()` while the model is
built, which measure now says as it does without a policy (Note [A script that ends
before the steps, under a policy], measure/worker.py).

Measured (`tests/clients/harness.py run_client`, the helper hunt57c, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, AMD Zen 4 AVX-512 bf16; every policy predicted = measured,
`--fake` the same ledger; docs/accuracy.md, "memory-transformer-xl and
taylor-series-linear-attention"):
- default: 103,368 B; `checkpoint:blocks.*` 89,912 B, `offload:blocks.*.attn` 81,112 B,
  `selective:@Block:save=mm,bmm` 96,056 B.
- every option but rotary (which refuses cross attention): 112,736 B.
- `--model vit`: 289,812 B + 569,528 B of kernel scratch (the depthwise convolutions) =
  859,340 B allocator.
"""

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client, skip_without)

skip_without("taylor_series_linear_attention")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_taylor_attention_with_its_options_is_predicted_as_measured():
    """Prenorm, gated value heads, one-headed keys/values, token shift, the even-power
    duplicates removed, a padding mask, cross attention in every other block; two batches
    accumulated, clipped. Checkpoint, selective on the attention class and offload, each
    predicted and measured to the byte; `--fake` equal; the doctor finds nothing."""
    argv = ["--prenorm", "--gate", "--one-kv", "--shift", "--even", "--mask", "--cross",
            "--accum", "2", "--clip"]
    pols = {"checkpoint:blocks.*": 102_040, "selective:@TaylorSeriesLinearAttn": 112_536,
            "offload:blocks.*": 77_704}
    run = run_client("train_taylor.py", argv, list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 112_736
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert fake_client_gaps("train_taylor.py", argv, ["offload:blocks.*"]) == {}
    assert_one_doctor_error("train_taylor.py", argv, 2, None, "")


@pytest.mark.slow
def test_the_librarys_vit_is_predicted_as_measured_with_its_kernel_scratch():
    """The library's ViT: the ledger with the kernel scratch of its depthwise convolutions
    is the allocator's; every layer's attention checkpointed (`layers.*.1`) and every
    attention offloaded by class, predicted as measured."""
    argv = ["--model", "vit"]
    pols = ["checkpoint:transformer.layers.*.1", "offload:@TaylorSeriesLinearAttn"]
    run = run_client("train_taylor.py", argv, pols, steps=2)
    assert run.ledger_peak == 289_812
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=859_340)
    for policy, peak in zip(pols, (858_556, 852_988)):
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)
