"""tensordict's `TensorDictSequential` of `TensorDictModule`s
(tests/clients/train_tensordict.py): each module reads and writes keys of the TensorDict
it is handed. Skipped without tensordict."""

from __future__ import annotations

import pytest

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("tensordict")
_imported = imported_first("tensordict")


def test_modules_that_write_into_the_tensordict_they_are_handed():
    """The MLPs the TensorDictModules wrap checkpoint exactly, and offload of the
    TensorDictModules themselves; checkpointing a TensorDictModule is refused (its re-run
    would store its output into the TensorDict again), where the refusal now says to
    checkpoint the modules inside it rather than only `use_cache=False`."""
    run = run_client("train_tensordict.py", ["--steps", "4"], [
        "checkpoint:module.*.module", "offload:module.*", "checkpoint:module.0"])
    assert run.ledger_peak == run.allocator_peak
    refused = run.policies.pop("checkpoint:module.0")
    assert refused.predicted is None and refused.measured is None, refused
    assert "whose forward stores new tensors into the TensorDict it is handed" in \
        refused.predict_refusal
    assert "checkpoint the modules inside it" in refused.measure_refusal
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
