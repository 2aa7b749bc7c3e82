"""Poutyne (tests/clients/train_poutyne.py): a Keras-like training framework's own loop,
`Model(network, "adam", "cross_entropy", batch_metrics=["accuracy"], epoch_metrics=["f1"])`
and `model.fit(...)` with its callbacks (`ClipNorm`, `StepLR`), validation data and
`batches_per_step` (accumulation: each micro-batch's loss times its size, the gradients
divided in place by the step's examples before `optimizer.step()`). Its loss and metrics
are `nn.Module`s of their own, called beside the network.

Measured (`tests/clients/harness.py run_client`, the helper hunt48a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC; ledger = allocator, no kernel scratch, every policy predicted =
measured; docs/accuracy.md, "poutyne"):
- the test's run (`--loop fit --accum 2 --clip 1 --sched step --valid --metrics --drop
  0.1`, 1 step): 66,372 B; `checkpoint:blocks.*` 64,836 B, `offload:blocks.0+selective:
  blocks.1.ff` 59,780 B, `offload:@Block` 51,568 B.
- 2 steps, `checkpoint:blocks.*` / `offload:blocks.*`: `--loop generator --valid --accum
  2` 80,600 B, 80,152 / 61,592 B; `--loop batch --valid` (`train_on_batch`) 68,564 B,
  68,180 / 60,428 B; `--loop hand --clip 1 --valid` (a plain loop over `model.network`)
  68,564 B, 68,180 / 60,432 B; every callback at once (`--clip 1 --clip-value 0.5 --sched
  policy --checkpoint --best --tracker --epochs 2 --steps 1 --valid`) 79,496 B, 79,112 /
  67,016 B.
The doctor finds nothing on any loop.
"""

import importlib.util

import pytest

if importlib.util.find_spec("poutyne") is None:
    pytest.skip("poutyne is not installed", allow_module_level=True)

# poutyne imports torchmetrics, which makes a 4 B tensor at import
# (`torchmetrics.functional.text.chrf._EPS_SMOOTHING`): the harness imports the script's
# imports before its first pass (Note [Tensors made at import], tests/clients/harness.py)
from tests.clients.harness import assert_one_doctor_error, run_client  # noqa: E402

pytestmark = pytest.mark.clients


def test_a_poutyne_fit_loop_is_predicted_as_measured():
    """`model.fit` with accumulation over 2 batches, gradient clipping and a StepLR
    callback, validation data, batch and epoch metrics and dropout: the ledger equals the
    allocator, a policy on every block, a mix (offload one block, selective on the other's
    feed-forward) and offload by class each predicted and measured to the byte; the
    doctor finds nothing on poutyne's loop (its loss times the batch size and the
    gradients divided in place are no undivided accumulation)."""
    argv = ["--loop", "fit", "--accum", "2", "--clip", "1", "--sched", "step", "--valid",
            "--metrics", "--drop", "0.1"]
    pols = {"checkpoint:blocks.*": 64_836,
            "offload:blocks.0+selective:blocks.1.ff": 59_780,
            "offload:@Block": 51_568}
    run = run_client("train_poutyne.py", argv, list(pols), steps=1)
    # no pinned scratch: which kernel the CPU picks may add some (none on this AMD box)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.ledger_peak == 66_372
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert_one_doctor_error("train_poutyne.py", argv, 2, None, "")
