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
