"""mmdit (tests/clients/train_mmdit.py): lucidrains' MMDiT 0.3.0, the joint-attention
block of Stable Diffusion 3 (text and image tokens, each with weights of its own, in one
`JointAttention`; adaptive layer norms from a time conditioning; hyper-connection residual
streams that expand the batch; the generalized MMDiT of 3 modalities with manifold-
constrained hyper-connections), trained as a rectified-flow denoiser with its time MLP in
one `Denoiser` module (hyper-connections 0.4.11, x-transformers beside it).

Measured (`tests/clients/harness.py run_client`, the helper hunt56a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC Zen 4 with AVX-512 bf16, one intra-op thread; ledger = allocator,
every policy predicted = measured or refused by both; `--fake --device cpu` the same
ledger and predictions), 2 steps:
- `--model mmdit --cond --streams 2 --mask --registers 2`: 600,648 B; `checkpoint:net.
  blocks.*` 517,518 B, `selective:@JointAttention` 610,684 B, `offload:net.blocks.*`
  413,236 B, `checkpoint:@HyperConnections` 535,880 B, `offload:net.blocks.0.image_ff+
  selective:net.blocks.1` 579,016 B.
- `--model general --modalities 3 --cond --streams 2 --mask` (mHC): `checkpoint:
  @JointAttention`, `offload:@ManifoldConstrainedHyperConnections`, `checkpoint:
  @AdaptiveLayerNorm`, each predicted as measured.
- `--model general --accum 2 --clip --optim sgd`: 313,408 B + 4 B of kernel scratch;
  `checkpoint:net.blocks.*` 280,614 B, `offload:net.blocks.*` 251,136 B.
- `--model general --modalities 3 --amp --mask --clip` (bf16 autocast): 359,008 B + 7,896 B
  of kernel scratch = 366,904 B; `checkpoint:net.blocks.*` 354,390 B, `offload:net.
  blocks.0` 333,838 B, `selective:net.blocks.1:save=mm` 375,680 B.
- `--model joint`, `--model adaptive`, `--model hc --streams 4`: every policy as measured.
The doctor on `--model general --streams 2` said "cut by `.detach()`" (an error) for the
last block's text stream, which the model's output drops: the mHC Sinkhorn's
`log_alpha - log_alpha.amax(...).detach()` (Note [A cut of a stabiliser],
memledger/trace/doctor_probe.py); and it named the empty `register_tokens` (Note [A
parameter with no elements], memledger/doctor/graph.py). `--bug detach-time` is its one
error, at the detach.
"""

from pathlib import Path

import pytest

from tests.clients.harness import (assert_pinned, doctor_with_ledger, fake_client_gaps,
                                   imported_first, run_client, skip_without)

skip_without("mmdit", "hyper_connections", "x_transformers")
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]
_imported = imported_first("mmdit", "hyper_connections")

MMDIT = ["--model", "mmdit", "--cond", "--streams", "2", "--mask", "--registers", "2"]


@pytest.mark.slow
def test_mmdit_with_time_conditioning_and_hyper_connections_is_predicted_as_measured():
    """SD3's MMDiT (2 blocks) with its time conditioning, 2 hyper-connection residual
    streams (the batch expanded 2x), a text mask and 2 register tokens: checkpoint and
    offload on the blocks, a class selector on the joint attention and one on the
    hyper-connections, each predicted and measured to the byte; ledger = allocator."""
    pols = {"checkpoint:net.blocks.*": 517_518, "selective:@JointAttention": 610_684,
            "offload:net.blocks.*": 413_236, "checkpoint:@HyperConnections": 535_880}
    run = run_client("train_mmdit.py", MMDIT, list(pols), steps=2)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 600_648
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


@pytest.mark.slow
def test_three_modalities_under_bf16_autocast_with_kernel_scratch_are_predicted_as_measured():
    """The generalized MMDiT over 3 modalities, its forward under bf16 autocast, a text
    mask, clipping: the bf16 matmuls' kernel scratch (oneDNN's, on a CPU with native bf16)
    is the ledger's gap to the allocator, and every policy is predicted to the byte."""
    argv = ["--model", "general", "--modalities", "3", "--amp", "--mask", "--clip"]
    pols = {"checkpoint:net.blocks.*": 354_390, "offload:net.blocks.0": 333_838,
            "selective:net.blocks.1:save=mm": 375_680}
    run = run_client("train_mmdit.py", argv, list(pols), steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.ledger_peak, amd_bf16=359_008)
    assert_pinned(run.allocator_peak, amd_bf16=366_904)   # + 7,896 B of kernel scratch
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)


@pytest.mark.slow
def test_three_modalities_with_manifold_constrained_streams_fake_equals_real():
    """The generalized MMDiT over text, image and audio tokens with mHC streams: the fake
    ledger (`trace --fake --device cpu`) and its predictions are the real ones."""
    argv = ["--model", "general", "--modalities", "3", "--cond", "--streams", "2", "--mask",
            "--depth", "1", "--batch", "1"]
    assert fake_client_gaps("train_mmdit.py", argv, [
        "checkpoint:@JointAttention", "offload:@ManifoldConstrainedHyperConnections"]) == {}


def test_the_doctor_on_a_stabilised_dead_stream_warns_and_finds_the_detached_time():
    """One block each. The last block's text stream of the generalized MMDiT never reaches
    the loss (the model returns per-modality tokens, the flow loss reads the image's): its
    parameters are unused (a warning), which the mHC Sinkhorn's `log_alpha - log_alpha.
    amax(...).detach()` made a `cut_graph` error on main. The empty `register_tokens` of
    the 2-modality MMDiT is no finding. `--bug detach-time` is one error, at its line."""
    report, _ = doctor_with_ledger("train_mmdit.py", ["--model", "general", "--streams", "2",
                                                      "--depth", "1"], 2)
    assert [(f.check, f.severity) for f in report.findings] == [
        ("unused_parameter", "warning")]
    assert report.findings[0].message.startswith(
        "19 trainable parameters (`net.blocks.0.attn_residual_fns.0.static_beta`")
    assert report.findings[0].evidence["bytes_without_grad"] == 10_168
    report, _ = doctor_with_ledger("train_mmdit.py", ["--model", "mmdit", "--cond", "--bug",
                                                      "detach-time", "--depth", "1"], 2)
    found = [(f.check, f.severity) for f in report.findings]
    assert found == [("cut_graph", "error"), ("unused_parameter", "warning"),
                     ("unused_parameter", "warning")]
    assert "`time_embed.mlp.0.weight`" in report.findings[0].message
    lines = (Path(__file__).parent / "train_mmdit.py").read_text().splitlines()
    assert lines[report.findings[0].where.line - 1].strip().startswith("cond = cond.detach()")
    assert not any("register_tokens" in f.message for f in report.findings)
