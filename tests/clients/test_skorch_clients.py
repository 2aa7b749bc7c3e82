"""skorch's `NeuralNetClassifier.fit` (tests/clients/train_skorch.py): no
`optimizer.step()` in the script (skorch steps with a closure inside its own
`train_step`), numpy data, a validation fold each epoch. Skipped without skorch."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("skorch")
_imported = imported_first("skorch")


def test_fit_traced_across_a_validation_epoch():
    """`trace` failed at the first step ("script raised TypeError: 'list' object is not a
    mapping": the step pre-hook read skorch's `NeuralNet._modules`, a list of names, as a
    module's dict: trace/roots.py `_script_names`). Now 6 steps across an epoch boundary
    (4 batches, then the validation fold under `no_grad`): ledger = allocator and every
    policy exact."""
    run = run_client("train_skorch.py", ["--steps", "8"], [
        "checkpoint:blocks.*", "offload:blocks.*", "checkpoint:blocks.0+offload:blocks.1"],
        steps=6)
    assert run.summary.steps_traced == 6
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
