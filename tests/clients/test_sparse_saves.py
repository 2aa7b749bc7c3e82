"""Saves of sparse tensors, told by the flag the trace records (tests/clients/
train_sparse_saves.py, plain torch): Note [A sparse save stays on the device]
(memledger/replay/engine.py)."""

from memledger.ledger.fake_info import fake_info
from tests.clients.harness import ledger_pass, predicted_peak, run_client


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


def test_a_csr_adjacency_is_counted_by_its_three_parts():
    """`--case csr`: the adjacency converted `to_sparse_csr()`: its row offsets (65 int64,
    520 B) are a storage of its own, its column indices and values views of the COO's
    parts. CSR was not counted (Note [Sparse tensors]): the ledger with its kernel scratch
    read 43,976 B against the allocator's 44,496 B. Now every byte, and the CSR save is
    flagged sparse and stays under offload."""
    pols = ["offload:layers.*", "checkpoint:layers.*"]
    run = run_client("train_sparse_saves.py", ["--case", "csr"], pols)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 44_496
    for policy, peak in zip(pols, (41_488, 58_084)):
        assert run.policies[policy].predicted == run.policies[policy].measured == peak, policy
    st = run.ledger.storages
    assert list(st.loc[st["op"] == "_to_sparse_csr.default", "bytes"]) == [65 * 8] * 2
    assert (run.ledger.saves["sparse"] == 1).sum() == 4


def test_fake_sparse_adjacencies_are_the_real_runs():
    """`trace --fake` of both adjacency cases equals the real ledger: peak, every category
    at it, two policies' predictions. COO: the edges of step 2 were the fake run's own draw
    (the step's `rand` weights, a float draw, were not made, and the generator fell behind:
    Rule 4 of Note [Draws a fake run makes for real]), with other duplicates: 37,800 B
    against 37,960 B (`temporary` -160). CSR: FakeTensorMode's CSR had no column indices
    nor values, and its parts were filed under "meta" (Note [Fake compressed layouts]):
    31,916 B against 37,556 B."""
    for case, peak in (("adjacency", 37_960), ("csr", 37_556)):
        real = ledger_pass("train_sparse_saves.py", ["--case", case])
        fake = ledger_pass("train_sparse_saves.py", ["--case", case], fake_device="cpu")
        assert real.peak().bytes == fake.peak().bytes == peak, case
        assert fake.at_peak() == real.at_peak(), case
        for policy in ("offload:layers.*", "checkpoint:layers.*"):
            assert predicted_peak(fake, policy) == predicted_peak(real, policy), (case, policy)
        said = [s.value for s in fake_info(fake).standins]
        assert not any("draw of its own" in v for v in said), case
        # a CSR's entries are 0 to FakeTensorMode, said at its line
        assert len(said) == (case == "csr"), (case, said)
