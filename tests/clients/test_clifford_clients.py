"""cliffordlayers 0.1.1 (tests/clients/train_clifford.py): Microsoft's Clifford neural layers
for PDE surrogates, the paper's models from `cliffordlayers.models` built as the library's
tests build them (a Clifford ResNet and FNO in 2-D, the FNO in 3-D) and a 1-D net of
`CliffordConv1d` blocks with a `CliffordLinear` head, on random multivector fields at tiny
sizes. Every Clifford layer builds its kernel from its blade weights and the algebra's
signature `g` in each forward; `g` is a plain float32 tensor attribute of the layer (not
a buffer), and `g[0] * w[1]` saves a view of it. The Fourier layers pair blades into
complex fields for `fft2`/`fftn` (complex temporaries only: nothing complex is saved).

Measured (`tests/clients/harness.py run_client`, the helper hunt56b, 2026-12-07, torch
2.13.0 CPU, AMD Zen 4 with AVX-512 bf16, OMP_NUM_THREADS=1, 2 steps; ledger (+ kernel
scratch) = allocator, every policy predicted = measured, `--fake --device cpu` the same
ledger and predictions):
- `--model conv1d --batchnorm --rollout 2`: 31,036 B (+ 4,308 = 35,344); checkpoint and
  selective refused alike (the batch norm writes its running stats), `offload:blocks.*`
  17,312 B.
- `--model conv1d --rollout 3 --clip`: 29,172 B (+ 4,308 B of conv scratch = 33,480);
  `offload:blocks.*` 17,576 B, `offload:head` 32,200 B (measured 17,588 and 32,204
  before Note [A constant a module holds, left on the device], measure/apply.py: the
  offloader read each layer's `g` back and held the 4 B copy across the three calls).
- `--model fno2d --rollout 2 --accum 2 --clip --norm --optim sgd`: 1,503,652 B;
  `selective:@CliffordFourierBasicBlock2d:save=_fft_c2c,bmm` 1,069,732 B,
  `offload:layers.*:min=4KiB` 477,444 B, `checkpoint:layers.0+offload:layers.1`
  612,764 B, `offload:@CliffordConv2d+checkpoint:@CliffordSpectralConv2d` 1,445,956 B.
- `--model resnet2d --rotation --rollout 2 --blocks 3`: 1,327,200 B + 73,984 B of scratch
  = 1,401,184 B; `selective:layers.*:save=convolution` 1,081,952 B,
  `checkpoint:@CliffordConv2d` 1,240,096 B, `offload:@CliffordBasicBlock2d` 369,016 B.
- `--model fno3d --grid 4 --rollout 2`: 2,232,676 B; `offload:@CliffordSpectralConv3d`
  1,397,092 B, `selective:layers.*:save=_fft_c2c,bmm` 1,752,232 B, `checkpoint:layers.0`
  1,605,544 B.
`selective:layers.*:save=_fft_c2c,einsum,bmm` is refused by both sides in one line (predict
priced it, 770,224 B on `--model fno2d --rollout 2 --clip`, before Note [Save names predict
checks without torch], replay/aten_names.py). The doctor finds nothing on the loop, and
finds `--bug clip-after-step` (clip_order).
"""

import importlib.util

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client)

if importlib.util.find_spec("cliffordlayers") is None:
    pytest.skip("cliffordlayers is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def _all_as_measured(run, pins: dict[str, int]) -> None:
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for policy, peak in pins.items():
        p = run.policies[policy]
        assert p.predicted == p.measured, (policy, p.predict_refusal, p.measure_refusal)
        assert_pinned(p.measured, amd_bf16=peak)


def test_a_rollout_offloads_around_the_signature_each_layer_holds():
    """A 1-D Clifford net fed its own output three times a step: each layer's signature `g`
    (4 B, a plain attribute) is saved by every call's kernel build. Offload wrote it out and
    read it back, holding the copy from the first call's backward to the third's, 4 B a
    layer over the prediction; it now stays on the device, as the ledger's buffer it is."""
    pols = {"offload:blocks.*": 17_576, "offload:head": 32_200, "checkpoint:blocks.*": 51_400}
    run = run_client("train_clifford.py", ["--model", "conv1d", "--rollout", "3", "--clip"],
                     list(pols))
    assert run.ledger_peak == 29_172
    assert_pinned(run.allocator_peak, amd_bf16=33_480)
    _all_as_measured(run, pins=pols)
    st = run.ledger.storages
    assert sorted(st.loc[st["category"] == "buffer", "name"]) == [
        "blocks.0.conv1.g", "blocks.0.conv2.g", "blocks.1.conv1.g", "blocks.1.conv2.g",
        "encoder.g", "head.g"]


@pytest.mark.slow
def test_a_clifford_fno_rollout_with_accumulation_and_clipping():
    """The 2-D Clifford FNO (spectral and 1x1 Clifford convs, Clifford group norm), a
    2-step rollout, 2 micro-batches, clipping, SGD with momentum: selective keeping the
    FFTs' and the geometric product's outputs, offload with a size floor, mixes and
    `@Class` selectors, each predicted as measured; the fake ledger is the real one."""
    argv = ["--model", "fno2d", "--rollout", "2", "--accum", "2", "--clip", "--norm",
            "--optim", "sgd"]
    pols = {"selective:@CliffordFourierBasicBlock2d:save=_fft_c2c,bmm": 1_069_732,
            "offload:layers.*:min=4KiB": 477_444,
            "checkpoint:layers.0+offload:layers.1": 612_764,
            "offload:@CliffordConv2d+checkpoint:@CliffordSpectralConv2d": 1_445_956}
    einsum = "selective:layers.*:save=_fft_c2c,einsum,bmm"   # einsum never reaches dispatch
    run = run_client("train_clifford.py", argv, [*pols, einsum])
    assert run.ledger_peak == 1_503_652
    assert_pinned(run.allocator_peak, amd_bf16=1_503_652)
    _all_as_measured(run, pins=pols)
    # priced by predict alone before Note [Save names predict checks without torch]
    p = run.policies[einsum]
    assert p.predicted is None and p.measured is None
    assert p.predict_refusal.removeprefix("memledger: ") == \
        p.measure_refusal.removeprefix("memledger: ")
    assert "save=einsum never reaches selective checkpointing" in p.measure_refusal
    assert fake_client_gaps("train_clifford.py", argv, list(pols)) == {}


@pytest.mark.slow
def test_rotational_clifford_resnet_and_the_3d_fno():
    """The rotational Clifford ResNet (g = (-1, -1), a frozen `zero_kernel` parameter in
    each conv's weight list) and the 3-D Clifford FNO (8-blade multivectors, `fftn`)."""
    pols = {"selective:layers.*:save=convolution": 1_081_952,
            "checkpoint:@CliffordConv2d": 1_240_096, "offload:@CliffordBasicBlock2d": 369_016}
    run = run_client("train_clifford.py", ["--model", "resnet2d", "--rotation", "--rollout",
                                           "2", "--blocks", "3"], list(pols))
    assert run.ledger_peak == 1_327_200
    assert_pinned(run.allocator_peak, amd_bf16=1_401_184)
    _all_as_measured(run, pins=pols)
    pols = {"offload:@CliffordSpectralConv3d": 1_397_092,
            "selective:layers.*:save=_fft_c2c,bmm": 1_752_232, "checkpoint:layers.0": 1_605_544}
    run = run_client("train_clifford.py", ["--model", "fno3d", "--grid", "4", "--rollout", "2"],
                     list(pols))
    assert run.ledger_peak == 2_232_676
    assert_pinned(run.allocator_peak, amd_bf16=2_232_676)
    _all_as_measured(run, pins=pols)


@pytest.mark.slow
def test_the_doctor_on_the_rollout_loop():
    """Nothing on the correct loop; a clip after the optimizer step found at its line."""
    argv = ["--model", "fno2d", "--rollout", "2", "--clip"]
    assert_one_doctor_error("train_clifford.py", argv, 2, None, "")
    assert_one_doctor_error("train_clifford.py", ["--model", "conv1d", "--bug",
                                                  "clip-after-step"], 2, "clip_order",
                            "torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)")


@pytest.mark.slow
def test_a_clifford_batch_norm_refuses_a_rerun_on_both_sides():
    """`CliffordBatchNorm1d` updates its running mean, covariance and batch count in place
    in every training forward: a re-run would count the batch twice, so checkpoint and
    selective over it are refused by predict and measure in the same line; offload is
    priced (17,312 B, 2-step rollout)."""
    pols = ["checkpoint:blocks.*", "selective:blocks.*", "offload:blocks.*"]
    run = run_client("train_clifford.py", ["--model", "conv1d", "--batchnorm", "--rollout",
                                           "2"], pols)
    assert run.ledger_peak == 31_036
    assert_pinned(run.allocator_peak, amd_bf16=35_344)
    for policy in pols[:2]:
        p = run.policies[policy]
        assert p.predicted is None and p.predict_refusal == p.measure_refusal
        assert "writes blocks.1.norm.num_batches_tracked in place" in p.predict_refusal
    _all_as_measured(run, pins={"offload:blocks.*": 17_312})
