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
  `selective:@SpectralDiscoBlock` 2,322,600 B; an offload of a DISCO convolution
  predicted 13,680 B under measure (docs/decisions.md, hunt54e: left open).
- `--model lsno` (2 steps): 3,682,361 + 1,018,440 B of kernel scratch = 4,700,801 B;
  `checkpoint:blocks.*` 4,555,265 B, `checkpoint:blocks.0+offload:blocks.1` 4,542,017 B.
The doctor finds nothing on the loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torch_harmonics") is None:
    pytest.skip("torch-harmonics is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_an_sfno_is_predicted_as_measured_by_block_and_spectral_convolution():
    """The SFNO's two blocks under checkpoint, a mix (offload on the first, selective on the
    second) and checkpoint on its `SpectralConvS2`s by class, each predicted and measured to
    the byte; the ledger is the allocator's with no kernel scratch, and the doctor finds
    nothing on its loop.

    The harness clears torch-harmonics' `lru_cache`s between passes (its Legendre tables
    and quadrature nodes, copied out of a process-wide cache): the allocator pass read
    256 B under the ledger pass that filled them (`_fresh_library_state`)."""
    argv = ["--model", "sfno"]
    pols = {"checkpoint:blocks.*": 399_296,
            "offload:blocks.0+selective:blocks.1": 401_852,
            "checkpoint:@SpectralConvS2": 432_064}
    run = run_client("train_harmonics.py", argv, list(pols), steps=2)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 438_336
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_harmonics.py", argv, 2, None, "")
