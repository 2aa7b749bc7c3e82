"""frame-averaging-pytorch 0.1.2 (tests/clients/train_frame_avg.py): lucidrains'
`FrameAverage` around a network, as its README wraps one: the points centred, the
eigenvectors of their covariance by `torch.linalg.eigh`, 2^dim frames from their signs,
the network run once on all the frames merged into the batch (every tensor argument
repeated per frame), the outputs mapped back and averaged. Around an x-transformers
`ContinuousTransformerWrapper` with a mask, egnn-pytorch `EGNN` layers, an MLP, and the
README's second form (the framed points handed back, the script calling its MLP once per
frame); stochastic frames, dims 2 and 3, accumulation, clipping, SGD / AdamW.

Measured (`tests/clients/harness.py run_client`, the helper hunt55a, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1, an AMD CPU with AVX-512 bf16; ledger = allocator, every policy predicted =
measured; docs/accuracy.md "frame-averaging-pytorch" for the other configurations):
- `--net xtf --mask` (2 steps): 1,020,056 B; `selective:@Attention` 1,062,392 B,
  `checkpoint:net.attn_layers.layers.2.1` 959,304 B, `offload:net.attn_layers` 582,968 B.
  Before this session `measure` failed under `selective:@Attention` ("script raised
  CallOperationError": einx wrapped the re-run's early stop; Note [An early stop a library
  wrapped], measure/apply.py).
- `--net egnn --mask` (2 steps): 6,191,120 B; `checkpoint:net.layers.*` 3,434,016 B,
  `offload:@EGNN` 1,810,672 B; `selective:@EGNN` refused alike (an addmm output changed in
  place). `--fake --device cpu` the same ledger.
The doctor finds nothing on the loop; `--keep-losses` is found.
"""

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client, skip_without)

skip_without("frame_averaging_pytorch", "x_transformers", "egnn_pytorch")
pytestmark = pytest.mark.clients


@pytest.mark.slow
def test_an_encoder_ending_in_einx_is_checkpointed_as_predicted():
    """x-transformers' `Attention` ends with `einx.where(mask, out, 0.)`, the last save of
    its region: the re-run's early stop is raised inside einx, which wraps it as a
    `CallOperationError`. On the old code `measure` failed under `selective:@Attention`
    where predict priced it; raised as einx's own stop, the stop and einx's error held each
    other (and the re-run's frames) until the collector ran: 251,872 B measured over the
    prediction under `checkpoint:net.attn_layers.layers.2.1`. Now both are predicted and
    measured to the byte."""
    pols = {"selective:@Attention": 1_062_392,
            "checkpoint:net.attn_layers.layers.2.1": 959_304}
    run = run_client("train_frame_avg.py", ["--net", "xtf", "--mask"], list(pols), steps=2)
    assert run.ledger_peak == 1_020_056
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)


def test_a_network_called_once_per_frame_is_predicted_as_measured():
    """The README's second form in 2-D: `FrameAverage()` hands back the framed points and
    the averaging function, and the script calls its MLP once per frame (4 calls of `net`
    in one forward, each a region of the policy); the doctor finds nothing on the loop and
    names the list that keeps every step's loss (`losses.append(loss)`: torch's mse_loss
    hands back a 0-dim view of its 2 x 16 x 2 fp32 unreduced buffer, 256 B a step)."""
    argv = ["--net", "manual", "--dim", "2"]
    pols = ["checkpoint:net", "offload:net", "checkpoint:net.0+offload:net.4"]
    run = run_client("train_frame_avg.py", argv, pols, steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy in pols:
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
    assert_one_doctor_error("train_frame_avg.py", argv, 3, None, "")
    assert_one_doctor_error("train_frame_avg.py", [*argv, "--keep-losses"], 3,
                            "cross_step_retention", "losses.append(loss)")


@pytest.mark.slow
def test_egnn_layers_under_frame_averaging_and_their_fake_ledger():
    """EGNN layers behind a module that takes the points first, with a node mask repeated
    per frame: checkpoint and offload predicted as measured, `selective:@EGNN` refused by
    both sides alike; `trace --fake --device cpu` gives the real ledger (peak, categories,
    the policies)."""
    argv = ["--net", "egnn", "--mask"]
    pols = ["checkpoint:net.layers.*", "offload:@EGNN", "selective:@EGNN"]
    run = run_client("train_frame_avg.py", argv, pols, steps=2)
    assert run.ledger_peak == 6_191_120
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy in pols[:2]:
        assert run.policies[policy].predicted == run.policies[policy].measured, policy
    sel = run.policies["selective:@EGNN"]
    assert sel.predicted is None and sel.measured is None
    assert fake_client_gaps("train_frame_avg.py", argv, pols[:2]) == {}
