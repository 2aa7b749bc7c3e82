"""pytorch-accelerated (tests/clients/train_accelerated.py): the library's `Trainer` as its
README trains a model, `trainer.train(train_dataset=..., eval_dataset=...,
num_epochs=..., per_device_batch_size=...)` over a TensorDataset, its own loop on
accelerate (no loop of the script's: steps are counted at the optimizer's step, inside
the library), with gradient accumulation, clipping by value after every micro-batch, a
OneCycleLR through the Trainer's placeholders, an evaluation epoch after the training
one, and dropout.

Measured (`tests/clients/harness.py run_client`, the helper hunt49b, 2026-12-07, torch
2.13.0 CPU, AMD EPYC, one intra-op thread; ledger = allocator, no kernel scratch, every
policy predicted = measured; docs/accuracy.md, "pytorch-accelerated"):
- the test's run (`--steps 2 --accum 2 --clip 1 --sched onecycle --valid --drop 0.1`,
  1 step of 2 micro-batches): 66,084 B; `checkpoint:blocks.*` 64,548 B, `offload:
  blocks.0+selective:blocks.1.ff` 59,492 B, `selective:@Block` 72,740 B.
- 2 steps: the default (`--steps 3`) 69,224 B, `checkpoint:blocks.*` 68,840,
  `offload:blocks.*` 56,744, `selective:@Block` 77,032 B; the same with the Trainer's own
  loaders (`--workers -1`: `num_workers=os.cpu_count()`) alike, and `trace --fake --device
  cpu` equal (Note [A DataLoader's workers in a fake run]); `--precision bf16` 61,000 B;
  `--accum 3 --max-steps 2 --clip 0.5` 81,832 B; `--epochs 3 --steps 1 --valid
  --callbacks` (SaveBestModel, EarlyStopping, ModelEma, StepBasedEvaluation) 79,580 B.
The doctor: an epoch of 3 micro-batches at `gradient_accumulation_steps=2` steps the
last one alone on loss / 2 (Note [A step short of micro-batches]).
"""

import importlib.util

import pytest

if importlib.util.find_spec("pytorch_accelerated") is None:
    pytest.skip("pytorch-accelerated is not installed", allow_module_level=True)

from tests.clients.harness import HERE, run_client  # noqa: E402

pytestmark = pytest.mark.clients

SCRIPT = "train_accelerated.py"
ARGV = ["--steps", "2", "--accum", "2", "--clip", "1", "--sched", "onecycle", "--valid",
        "--drop", "0.1"]


def test_the_trainers_own_loop_is_predicted_as_measured_and_its_short_step_found():
    """The Trainer's loop: every byte of the allocator explained, a policy on every block,
    a mix (offload one block, selective on the other's feed-forward) and selective by
    class predicted and measured to the byte. The doctor on an epoch one micro-batch past
    the last whole step: the Trainer steps on it alone, its loss divided by 2 as the
    others', half the mean gradient (`short_accumulation`, at the script's
    `trainer.train(` line, the innermost frame of the user's code)."""
    from memledger.doctor.run import diagnose_in_process

    pols = {"checkpoint:blocks.*": 64_548,
            "offload:blocks.0+selective:blocks.1.ff": 59_492,
            "selective:@Block": 72_740}
    run = run_client(SCRIPT, ARGV, list(pols), steps=1)
    # no pinned scratch: which kernel the CPU picks may add some (none on this AMD box)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.ledger_peak == 66_084
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak

    report, outcome = diagnose_in_process(HERE / SCRIPT, [
        "--steps", "1", "--accum", "2", "--tail", "1", "--clip", "1", "--valid"], 2)
    assert outcome.code == 0, outcome.reason
    (f,) = report.findings
    assert (f.check, f.severity) == ("short_accumulation", "warning")
    assert f.evidence == {"micro_batches": 1, "divisor": 2, "steps": [2], "full_steps": [1]}
    line = (HERE / SCRIPT).read_text().splitlines()[f.where.line - 1]
    assert line.strip().startswith("trainer.train(")
