"""pytorch-ignite's `create_supervised_trainer` (tests/clients/train_ignite.py): the
script never calls `optimizer.step()`; with `gradient_accumulation_steps=2` a step is two
batches. Found exact at once; kept so. Skipped without ignite."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("ignite")
_imported = imported_first("ignite")


@pytest.mark.parametrize("case, policies", [
    ("cnn", ["checkpoint:*", "offload:*", "checkpoint:0+offload:1"]),
    ("accum", ["checkpoint:*", "selective:0"]),
])
def test_other_peoples_trainer(case, policies):
    run = run_client("train_ignite.py", ["--case", case, "--steps", "8"], policies)
    assert run.summary.steps_traced == 2
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
