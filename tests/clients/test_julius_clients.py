"""julius (tests/clients/train_julius.py): a small audio denoiser that runs julius's
filters inside its forward: `SplitBands` (gains learned per band), `ResampleFrac` up by
5/4 and back, the functional `lowpass_filter` (a `LowPassFilters` module built on every
call) and a `LowPassFilters` module; `--fft` forces julius's FFT convolution
(`as_strided` frames, `rfft`, a complex product, `irfft`) in every filter.

Measured (`tests/clients/harness.py run_client`, the helper hunt52d, 2026-12-07, torch
2.13.0 CPU, AMD EPYC AVX2, one intra-op thread; ledger = allocator, every policy
predicted = measured), 2 steps, length 256:
- defaults (FFT where a filter is longer than 65 taps): 479,108 B; `checkpoint:blocks.*`
  366,340 B, `selective:@Block` 489,220 B, `offload:blocks.*` 315,268 B, `checkpoint:up`
  481,668 B, `offload:lowpasses+checkpoint:down` and `selective:@SplitBands` 479,108 B.
- `--fft`: 489,752 B; `checkpoint:blocks.*` 376,984 B, `selective:lowpasses` 551,424 B,
  `checkpoint:lowpasses+offload:up` 546,880 B.
`trace --fake --device cpu` equals the real ledger (peak, categories, policies) with and
without `--fft`; the doctor finds nothing (`--validate` too).
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("julius") is None:
    pytest.skip("julius is not installed", allow_module_level=True)
pytestmark = [pytest.mark.clients, pytest.mark.usefixtures("one_thread")]   # bytes move with the intra-op threads (relations hold on 2 too)


def test_julius_filters_in_a_forward_are_predicted_as_measured():
    """`--fft --length 128`: offload on the conv blocks, checkpoint on both resamplers
    (`@ResampleFrac`), selective on the low-pass bank's FFT convolution, each predicted
    and measured to the byte; the doctor finds nothing on the loop."""
    argv = ["--fft", "--length", "128"]
    pols = {"offload:blocks.*": 205_720, "checkpoint:@ResampleFrac": 291_224,
            "selective:@LowPassFilters": 328_832}
    run = run_client("train_julius.py", argv, list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 287_640
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_julius.py", argv, 2, None, "")
