"""torch-harmonics (tests/clients/train_harmonics.py): NVIDIA's Spherical Fourier Neural
Operator from the library's examples (`SphericalFourierNeuralOperator`: an encoder conv,
blocks of RealSHT -> complex64 spectral weights by einsum -> InverseRealSHT plus an MLP of
1x1 convs, the SHT modules shared among the blocks, their Legendre tables and quadrature
weights non-persistent buffers made at init), on random fields on a 16 x 32 grid with the
quadrature-weighted `SquaredL2LossS2`. torch-harmonics 0.8.0 (the pure-torch build: the
0.9.x wheels' compiled extensions do not load against torch 2.13).

Measured (`tests/clients/harness.py run_client`, the helper hunt54e, 2026-12-07, torch
2.13.0 CPU, OMP_NUM_THREADS=1; ledger = allocator, every policy predicted = measured):
- `--model sfno` (2 steps): 438,336 B; `checkpoint:blocks.*` 399,296 B, `selective:
  blocks.*` 489,408 B, `offload:blocks.*` 314,876 B, `checkpoint:@SpectralConvS2`
  432,064 B, `offload:blocks.0+selective:blocks.1` 401,852 B; `--fake` the same ledger.
- `--model sht` (2 steps): 2,085,008 B + 205,200 B of kernel scratch (the sparse `bmm`s
  of the DISCO convolutions) = 2,290,208 B allocator; `checkpoint:blocks.*` 1,952,160 B,
  `selective:@SpectralDiscoBlock` 2,322,600 B, `offload:blocks.0.disco` 1,995,296 B
  (predicted 13,680 B under before Note [A sparse save stays on the device],
  replay/engine.py), `offload:blocks.*` 1,862,456 B.
- `--model lsno` (2 steps): 3,682,361 + 1,018,440 B of kernel scratch = 4,700,801 B;
  `checkpoint:blocks.*` 4,555,265 B, `checkpoint:blocks.0+offload:blocks.1` 4,542,017 B.
The doctor finds nothing on the loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, assert_pinned, run_client

if importlib.util.find_spec("torch_harmonics") is None:
    pytest.skip("torch-harmonics is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_spherical_blocks_with_a_sparse_disco_filter_are_predicted_as_measured():
    """`--model sht` on an 8 x 16 grid: two blocks of RealSHT -> complex64 weights by
    einsum -> InverseRealSHT plus a DISCO convolution (its filter a sparse COO `psi` made
    at init and held as a plain attribute; `torch.bmm(psi, x)` saves it once per output
    longitude). An offload of one DISCO convolution, checkpoint and offload on both
    blocks, each predicted and measured to the byte; the ledger with its kernel scratch
    (the sparse bmm's, on AVX2 22,680 B) is the allocator's; the doctor finds nothing.

    `offload:blocks.0.disco` predicted 241,744 B against 243,256 B measured: replay moved
    psi's values (378 float32, 1,512 B), which measure's offloader leaves on the device
    (a sparse tensor has no storage to write out); Note [A sparse save stays on the
    device] (replay/engine.py). The harness clears torch-harmonics' `lru_cache`s between
    passes (`_fresh_library_state`): the allocator pass read the Legendre tables the
    ledger pass had cached, 256 B under it on `--model sfno`."""
    argv = ["--model", "sht", "--embed", "4", "--nlat", "8", "--nlon", "16"]
    pols = {"offload:blocks.0.disco": 243_256, "checkpoint:blocks.*": 246_712,
            "offload:blocks.*": 226_944}
    run = run_client("train_harmonics.py", argv, list(pols), steps=2)
    assert run.ledger_peak == 257_440
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=280_120)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
    assert_one_doctor_error("train_harmonics.py", argv, 2, None, "")
