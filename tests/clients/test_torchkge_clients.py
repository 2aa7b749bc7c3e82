"""torchkge (tests/clients/train_kge_lie.py --lib kge): knowledge-graph embeddings as its
README trains them: a `KnowledgeGraph` built from a pandas DataFrame of (from, rel, to)
triples, batches from its `DataLoader`, negatives made each step by its Bernoulli sampler,
TransE's scores of the true and corrupted facts, its `MarginLoss`, Adam, and the entity
embeddings renormed after each step (`normalize_parameters`: the normed table assigned to
the weight's `.data`, a new storage for the parameter under no_grad).

Measured (`tests/clients/harness.py run_client`, the helper hunt51e, 2026-12-07, torch
2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread; ledger = allocator, every policy predicted =
measured; 2 steps):
- `--lib kge` (TransE, L2): 25,248 B; `checkpoint:ent_emb` 45,088 B (before: 45,920
  predicted, Note [A re-run that stops before its first op]), `offload:ent_emb` 25,248 B,
  `selective:@Embedding` and `checkpoint:*` 55,904 B. `--no-renorm`: the same bytes.
- `--model distmult`: 28,256 B; `checkpoint:ent_emb` 48,096 B (before 48,928),
  `selective:@Embedding` 59,936 B (before 63,008). `--model transh --trainer` (the library's
  `Trainer.process_batch`): 45,652 B; `selective:@Embedding` 86,100 B (before 86,740).
- `--sparse` (`sparse=True` tables, SparseAdam): 32,556 B + 12 B of kernel scratch =
  allocator (before: trace exit 3, the script runs); `checkpoint:ent_emb` 44,824 B.
- `--lib lie` (lie-transformer-pytorch): 248,568 B; `offload:net.blocks.*.*` 210,956 B,
  `checkpoint:net.blocks.*.1` 249,984 B; `checkpoint:net.blocks.*.*` and
  `selective:@LieSelfAttention` refused by both (each attention writes its ball radius `r`
  in place in its training forward). `--reversible`: 176,244 B, policies change nothing.
The doctor finds nothing on either loop.
"""

import importlib.util

import pytest

from tests.clients.harness import assert_one_doctor_error, run_client

if importlib.util.find_spec("torchkge") is None:
    pytest.skip("torchkge is not installed", allow_module_level=True)
pytestmark = pytest.mark.clients


def test_transe_with_its_renorm_is_predicted_as_measured():
    """TransE reads the entity table four times a forward (heads and tails, true and
    corrupted): `checkpoint:ent_emb` re-runs each call at the unpack of its ids, a re-run
    that stops before its first op, its generator fork 832 B over measured before; offload
    of the table's calls, selective on every Embedding. The renorm's new weight storage
    stays a parameter; the doctor finds nothing on the loop."""
    pols = {"checkpoint:ent_emb": 45_088, "offload:ent_emb": 25_248,
            "selective:@Embedding": 55_904}
    run = run_client("train_kge_lie.py", ["--lib", "kge"], list(pols), steps=2)
    assert run.ledger_peak == run.allocator_peak == 25_248
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    assert run.ledger.at_peak()["parameter"] == (40 + 4) * 16 * 4 == 2_816
    assert_one_doctor_error("train_kge_lie.py", ["--lib", "kge"], 2, None, "")
