"""An embedding table read several times a forward (tests/clients/train_gathered_rows.py: a
knowledge-graph scorer as torchkge's DistMult scores, in plain torch). Measured by the helper
hunt51e, 2026-12-07, torch 2.13.0 CPU, AMD EPYC (AVX2), one intra-op thread, 1 step."""

from tests.clients.harness import run_client


def test_a_rerun_that_stops_before_its_first_op_forks_after_the_frees_at_its_unpack():
    """`checkpoint:ent_emb` re-runs each of the table's four calls at the unpack of its ids,
    its only save: the re-run forks the generator's state (5,056 B) and stops at that pack
    before any op. The replay put the fork in the slot before the unpacking node's first op,
    where the node before it still held what it let go of as it returned: 832 B over
    measured here (39,816 B), `checkpoint:rel_emb` 3,072 B (33,672 B). The fork now lives
    just before that op, after its frees (Note [A re-run that stops before its first op],
    replay/engine.py)."""
    pols = {"checkpoint:ent_emb": 38_984, "checkpoint:rel_emb": 30_600}
    run = run_client("train_gathered_rows.py", [], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 19_144
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_two_sparse_gradients_of_one_table_are_summed_untraced_as_traced():
    """With `sparse=True` the engine sums the table's per-call gradients, sparse, out of place
    (torch's `can_accumulate_inplace` wants a dense buffer). The collector asked the first
    one for its storage to see whether the untraced run writes the sum into it, and a sparse
    tensor has none: `trace` exited 3 ("Cannot access storage of SparseTensorImpl") where the
    script runs. Now: the ledger with its kernel scratch = the allocator, and the policy
    predicted as measured."""
    run = run_client("train_gathered_rows.py", ["--sparse"], ["checkpoint:ent_emb"], steps=1)
    assert run.ledger_peak == 29_264
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    p = run.policies["checkpoint:ent_emb"]
    assert p.predicted == p.measured == 39_752
