"""torch-lr-finder (tests/clients/train_lr_finder.py): `LRFinder(model, optimizer,
criterion)` caches the model's and the optimizer's `state_dict` (a deep copy in memory),
`range_test` runs optimizer steps of its own with a rate schedule of its own (and, given a
`val_loader`, a validation loss under `no_grad` after each), `reset()` loads the cache back,
and the script trains at the rate found. memledger counts the range test's steps as steps.

Measured (`tests/clients/harness.py run_client`, the helper hunt53a, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy predicted
= measured): `--num-iter 2 --val --dropout 0.1` (3 steps): 157,444 B;
`checkpoint:blocks.*` 160,904 B, `offload:@Block` 157,444 B, `selective:blocks.0`
160,904 B. `--num-iter 3` (5 steps) 156,104 B, `--cache-dir` 151,616 B, `--opt adam --amp`
205,728 B + 12 B of kernel scratch, every policy as measured. The doctor is silent on the
loop as written; with `--bug zero-grad-after` it finds the gradient of the range test's
last batch, which `reset()` leaves on the parameters, added into the first training step.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torch_lr_finder") is None:
    pytest.skip("torch-lr-finder is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients

PARAMS = (16 * 32 + 32 + 2 * (2 * 32 + 32 * 64 + 64 + 64 * 32 + 32) + 32 * 4 + 4) * 4


def test_a_range_test_then_training_is_predicted_as_measured_and_its_cache_is_no_batch():
    """Two range-test steps with a validation loader, the reset, one training step: three
    policies predicted and measured to the byte. The in-memory cache (a deep copy of the
    parameters, held by the finder to the end) is `other`; after the validation's loss
    under `no_grad` the reset's `param.copy_(cached)` ran in the loss phase that forward
    left open, and each cached copy read as the batch: `input` 41,360 B at the peak, of
    which 4,608 B are the data set (Note [A load into the model after an evaluation],
    trace/collector.py). The doctor finds the reset's leftover gradient where the loop
    zeroes after its step."""
    argv = ["--num-iter", "2", "--val", "--dropout", "0.1"]
    pols = {"checkpoint:blocks.*": 160_904, "offload:@Block": 157_444,
            "selective:blocks.0": 160_904}
    run = run_client("train_lr_finder.py", argv, list(pols), steps=3)
    assert run.ledger_peak == run.allocator_peak == 157_444
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    at = run.ledger.at_peak()
    assert PARAMS == 36_752
    assert (at["parameter"], at["gradient"], at["optimizer_state"]) == (PARAMS,) * 3
    assert (at["other"], at["input"]) == (PARAMS, 64 * 16 * 4 + 64 * 8)
    assert_one_doctor_error("train_lr_finder.py", ["--num-iter", "2", "--bug",
                                                   "zero-grad-after"], 3, "grad_leak",
                            "loss.backward()")
