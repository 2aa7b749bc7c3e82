"""Sparse gradients accumulated in place (tests/clients/train_sparse_accum.py, plain torch):
Note [Sparse parts replaced inside an op] (memledger/trace/collector.py), found on
product-key-memory's `--sparse --accumulate 2` (tests/clients/test_pkm_clients.py) and
pinned here, where CI runs it without the library."""

from tests.clients.harness import run_client

BIG = ["--batch", "64", "--dim", "64", "--sgd"]


def test_the_old_parts_of_a_sparse_gradient_live_while_the_sum_is_made():
    """A second micro-batch's EmbeddingBag gradient (512 ids of 64 floats: 4,096 B of
    indices, 131,072 B of values) added into the first, which the ledger read as a copy
    of the batch's ids and the backward's values (Note [A sparse gradient kept as made]):
    `add_` makes the sum's parts (8,192 + 262,144 B) before it frees the old ones, and the
    ledger freed those at the op's own event, 135,168 B under the allocator (438,804 B
    against 573,972 B). Then a third micro-batch (an Embedding, the ids kept): the parts
    replaced now are the first sum's, read as made outside dispatch: 571,860 B against
    842,196 B."""
    run = run_client("train_sparse_accum.py", ["--bag", "--drop", *BIG], [], steps=1)
    assert run.ledger_peak == run.allocator_peak == 573_972
    run = run_client("train_sparse_accum.py", ["--accumulate", "3", *BIG], [], steps=1)
    assert run.ledger_peak == run.allocator_peak == 842_196


def test_a_checkpointed_lookup_whose_ids_the_sparse_gradient_keeps():
    """Note [A sparse gradient's part ends no backward] (replay/engine.py): a memory that
    makes its ids in forward (a top-k, as a product-key memory does) and looks them up in
    an EmbeddingBag(sparse=True), checkpointed. The gradient's indices are a view of the
    ids, so they lived to `zero_grad` and told the region's backward end: its RNG state
    (5,056 B) was held to the optimizer's step, 45,552 B predicted against 40,496 B
    measured. With 64 x 16 ids the re-made ids went with the node that unpacked them:
    156,248 B predicted against 157,336 B."""
    run = run_client("train_sparse_accum.py", ["--memory", "--accumulate", "1"],
                     ["checkpoint:mem"], steps=1)
    assert run.ledger.peak_with_scratch() == run.allocator_peak == 40_496
    assert (run.policies["checkpoint:mem"].predicted,
            run.policies["checkpoint:mem"].measured) == (40_496, 40_496)
    argv = ["--memory", "--accumulate", "1", "--batch", "64", "--ids", "16", "--rows",
            "256", "--dim", "8"]
    run = run_client("train_sparse_accum.py", argv, ["selective:mem"], steps=1)
    assert (run.policies["selective:mem"].predicted,
            run.policies["selective:mem"].measured) == (157_336, 157_336)
