"""accelerate's own loop saved and resumed with its state functions
(tests/clients/train_accelerate.py): `save_state` / `load_state`, `skip_first_batches`,
accumulation over two micro-batches with clipping on the step that syncs."""

from __future__ import annotations

import pytest

from tests.clients.harness import assert_one_doctor_error, imported_first, run_client, \
    run_plainly, skip_without

pytestmark = pytest.mark.clients
skip_without("accelerate")
_imported = imported_first("accelerate")

SCRIPT = "train_accelerate.py"


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """The state of a 4-step run, as `accelerator.save_state` wrote it."""
    out = tmp_path_factory.mktemp("accelerate") / "state"
    run_plainly(SCRIPT, ["--steps", "4", "--save", str(out)])
    return out


def test_a_resumed_run_is_predicted_to_the_byte(saved):
    """The loaded optimizer state, scheduler and sampler: every byte of the allocator
    explained and each policy's peak predicted as measured."""
    run = run_client(SCRIPT, ["--resume", str(saved), "--steps", "3"],
                     ["checkpoint:layers.*", "offload:layers.*",
                      "checkpoint:layers.0+offload:layers.1"], steps=2)
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert run.summary.at_peak["optimizer_state"] > 0   # AdamW's moments, loaded
    for text, p in run.policies.items():
        assert p.predicted is not None and p.predicted == p.measured, (text, p)


def test_the_doctor_reads_a_resumed_scheduler_from_where_it_was(saved):
    """Note [A scheduler resumed from a checkpoint] (trace/doctor_probe.py): the scheduler's
    count carries the saved run's 4 steps; the doctor read them as this run's ("stepped 6
    times for 3 optimizer steps", "ran before the first optimizer.step()")."""
    assert_one_doctor_error(SCRIPT, ["--resume", str(saved)], 3, None, "")
