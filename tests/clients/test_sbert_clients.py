"""sentence-transformers (tests/clients/train_sbert.py): a tiny BERT bi-encoder trained by
`SentenceTransformerTrainer` or a plain loop with its contrastive losses, above all
`CachedMultipleNegativesRankingLoss` (GradCache: a no-grad embedding pass in mini-batches,
each keeping the generator's state; the loss's gradient w.r.t. the embeddings cached; every
mini-batch run again with grad inside a hook on the returned loss, during its backward).
Skipped without sentence-transformers."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")   # built from a config: never reach the hub

from tests.clients.harness import imported_first, run_client, skip_without

pytestmark = pytest.mark.clients
skip_without("sentence_transformers")
_imported = imported_first("sentence_transformers")

LAYERS = "model.0.model.encoder.layer"
RNG_STATE = 5_056   # torch.get_rng_state().nbytes: the CPU generator's mt19937 state


def test_cached_mnrl_under_the_trainer_explains_every_byte():
    """Each embedded mini-batch's `RandContext` keeps a `torch.get_rng_state()` (5,056 B,
    made in C++, never handed to an op) until the loss's backward hook has re-run every
    mini-batch, and each re-run forks the generator (one more state while it runs): the
    ledger read 20,224 B (4 states) under the allocator, at the peak in the last
    mini-batch's backward (Note [Generator states the script keeps], trace/rng_state.py).
    The encoder's layers run with grad only inside backward, so a policy leaves them as
    they are: predicted = measured = the baseline."""
    run = run_client("train_sbert.py", ["--loss", "cached_mnrl", "--steps", "3"],
                     [f"checkpoint:{LAYERS}.*"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    states = run.ledger.storages
    states = states[states.op == "torch.get_rng_state"]
    # per step: 2 columns x 2 mini-batches kept, and one fork per re-run
    assert states.groupby("step").size().to_dict() == {1: 8, 2: 8}
    assert set(states.bytes) == {RNG_STATE}
    for text, p in run.policies.items():
        assert p.predicted == p.measured == run.allocator_peak, (text, p)


def test_mnrl_plain_loop_policies_exact():
    """The same model without the cache, in a plain loop: every layer's saved activations
    under each policy, predicted to the byte."""
    run = run_client("train_sbert.py", ["--loss", "mnrl", "--loop", "plain", "--steps", "3"],
                     [f"selective:{LAYERS}.*", f"checkpoint:{LAYERS}.0+offload:{LAYERS}.1"])
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    for text, p in run.policies.items():
        assert p.predicted == p.measured, (text, p)
        assert p.measured < run.allocator_peak, (text, p)


def test_the_doctor_reads_gradcache_as_an_unused_pooler_not_a_cut():
    """BERT's pooler (the checkpoint's `BertModel` has one; mean pooling never reads it)
    gets no gradient: true, and a warning. Under GradCache every parameter is used under
    `no_grad` first (a cut) and with grad again inside a hook on the loss, in autograd's
    engine, where the probe's torch-function mode is off: the doctor said "cut by an op
    under `torch.no_grad()`" (an error, which stops `compare`). A module run with grad in
    there now goes around the cut on its own parameters (Note [A cut the graph goes
    around], trace/doctor_probe.py), as `--loss mnrl` always read."""
    from memledger.doctor.run import diagnose_in_process

    script = Path(__file__).with_name("train_sbert.py")
    report, outcome = diagnose_in_process(script, ["--loss", "cached_mnrl", "--loop", "plain"], 2)
    assert outcome.code == 0, outcome.reason
    assert [(f.check, f.severity, f.evidence) for f in report.findings] == [
        ("unused_parameter", "warning", {"params_without_grad": 2, "params_with_grad": 37,
                                         "bytes_without_grad": 16_640, "steps": [1, 2]})]
    assert "`model.0.model.pooler.dense.weight`, `model.0.model.pooler.dense.bias`" in \
        report.findings[0].message
    assert "the output never reached the loss" in report.findings[0].message
