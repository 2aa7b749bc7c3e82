"""Saves of sparse tensors, told by the flag the trace records (tests/clients/
train_sparse_saves.py, plain torch): Note [A sparse save stays on the device]
(memledger/replay/engine.py)."""

from tests.clients.harness import run_client


def test_ids_the_model_computes_are_moved_though_a_sparse_gradient_takes_them():
    """`--case hashed`: the model hashes its tokens into (512, 16) int64 ids (an
    activation, 512 x 16 x 8 = 65,536 B) and looks them up in an `nn.Embedding(sparse=True)`,
    which saves them dense; its sparse gradient takes them for its indices in backward.
    The fifty-fourth session's rule read them as a sparse part held on the device:
    `offload:emb` predicted 6,719,272 B (the baseline) against 6,653,736 B measured. The
    save's own flag says dense: predicted = measured."""
    run = run_client("train_sparse_saves.py", ["--case", "hashed"], ["offload:emb"])
    assert run.ledger_peak == run.allocator_peak == 6_719_272
    assert run.policies["offload:emb"].predicted == run.policies["offload:emb"].measured \
        == 6_719_272 - 512 * 16 * 8
    assert not run.ledger.saves["sparse"].any()   # every save dense, the ids' included


def test_a_sparse_adjacency_the_script_makes_is_saved_sparse_and_stays():
    """`--case adjacency`: a coalesced (64, 64) COO adjacency of 256 drawn edges made by the
    script each step and saved by each layer's `torch.sparse.mm` (its values, 256 float32,
    1,024 B). The batch was excepted from the sparse rule, so replay counted a read-back
    copy the offloader never makes: `offload:layers.*` 40,072 B predicted against 39,048 B
    measured. Now every `saved` record of it carries `sparse: 1`, and predicted =
    measured."""
    pols = ["offload:layers.*", "checkpoint:layers.*"]
    run = run_client("train_sparse_saves.py", ["--case", "adjacency"], pols)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 42_056
    for policy, peak in zip(pols, (39_048, 56_300)):
        assert run.policies[policy].predicted == run.policies[policy].measured == peak, policy
    st, saves = run.ledger.storages, run.ledger.saves
    sparse = saves[saves["sparse"] == 1]
    # two layers x two steps, each the adjacency's values (256 float32: the storage keeps
    # the drawn count through the coalesce)
    assert len(sparse) == 4
    assert (st.loc[sparse["sid"], "bytes"] == 1_024).all()
