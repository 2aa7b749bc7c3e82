"""pause-transformer (tests/clients/train_pause.py): lucidrains' Pause Transformer: each
layer's attention and feedforward run twice a forward, over the main sequence and over
every token's learned pause tokens (packed, folded into the batch), the previous
position's last pause token folded back into the main stream (`IntegratePreviousThought`).
pause-transformer 0.0.7; its attention builds a float causal mask that `masked_fill`
refuses, so the script swaps in `BoolMaskCausalAttention` (the same with a bool mask).

Measured (`tests/clients/harness.py run_client`, the helper hunt56d, 2026-12-07, torch
2.13.0 CPU, AMD Zen 4 (AVX-512 bf16), OMP_NUM_THREADS=1; ledger = allocator, every policy
predicted = measured to the byte; `--fake` the same ledger; the doctor finds nothing):
- default (2 pause tokens, 2 steps): 293,442 B; `checkpoint:layers.*.*` 217,372 B,
  `selective:layers.*.*` 291,356 B, `offload:layers.*.*` 157,220 B, `checkpoint:layers.0.*+
  offload:layers.1.*` 195,236 B, `selective:@BoolMaskCausalAttention` 301,868 B,
  `offload:integrate_prev_pause` 280,642 B; `checkpoint:@IntegratePreviousThought+
  offload:@RMSNorm` refused by both (the regions nest).
- `--pause 3 --uniform --accum 2 --optim sgd`: 342,484 B; `selective:layers.*.*:save=mm`
  277,140 B, `selective:layers.*.*:save=addmm,mm` 311,956 B, `offload:@Linear` 265,524 B,
  `checkpoint:layers.1.1+offload:layers.0.0+selective:layers.1.0` 291,348 B.
- `--amp --clip 1`: 245,538 B + 1,656 B of kernel scratch = 247,194 B;
  `checkpoint:layers.*.*` 215,356 B, `offload:layers.*.*` 155,268 B; `selective:` refused
  by both (a weight's autocast cast taken from autocast's cache).
`check --budget 200KiB -- --pause 3`: over, 334.3 KiB, exit 1.
"""

import importlib.util

import pytest

from tests.clients.harness import (assert_one_doctor_error, assert_pinned, fake_client_gaps,
                                   run_client)

if importlib.util.find_spec("pause_transformer") is None:
    pytest.skip("pause-transformer is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

TINY = ["--dim", "8", "--seq", "4"]


@pytest.mark.slow
def test_layers_run_over_pause_tokens_are_predicted_as_measured():
    """Each layer run twice a forward (main sequence, then pause tokens folded into the
    batch), random pause lengths per token, two accumulated micro-batches, clipping: a
    checkpoint of every layer part, an op-level selective save list, a checkpoint of one
    part beside an offload of another and a selective of a third, each predicted and
    measured to the byte; the ledger is the allocator's."""
    argv = [*TINY, "--pause", "3", "--uniform", "--accum", "2", "--clip", "1"]
    pols = {"checkpoint:layers.*.*": 118_824,
            "selective:layers.*.*:save=mm": 130_600,
            "checkpoint:layers.1.1+offload:layers.0.0+selective:layers.1.0": 115_888}
    run = run_client("train_pause.py", argv, list(pols), steps=2)
    assert run.ledger_peak == 125_200
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, amd_bf16=125_200)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, amd_bf16=peak)


@pytest.mark.slow
def test_pause_transformer_fake_and_doctor():
    """`--fake` gives the real ledger and the same predictions; the doctor finds nothing
    on the loop, and finds the gradients a loop that never zeroes them carries into the
    next step, at its backward line."""
    argv = [*TINY]
    assert fake_client_gaps("train_pause.py", argv,
                            ["checkpoint:layers.*.*", "offload:layers.*.*"]) == {}
    assert_one_doctor_error("train_pause.py", argv, 2, None, "")
    assert_one_doctor_error("train_pause.py", [*argv, "--bug", "no-zero-grad"], 2,
                            "grad_leak",
                            "(loss / args.accum if args.accum > 1 else loss).backward()")
