"""A custom Function's backward that lets go of what it unpacked before it returns
(tests/clients/train_lets_go.py; Note [What a node lets go of before it returns],
memledger/trace/collector.py)."""

from tests.clients.harness import run_client


def test_what_a_backward_lets_go_of_early_goes_there_under_a_policy():
    """`ScaleByMean.backward` reads the saved h (16 x 256 fp32 = 16,384 B), `del h`, then
    makes its 262,144 B scratch, where the step peaks. Under offload the copy read back,
    under checkpoint the re-made h, is gone by then. Before: the replay held it to the
    node's return, and `offload:*` was predicted 778,252 B against 761,868 B measured,
    `checkpoint:*` 783,308 against 766,924 (16,384 B, one h, over). With `--keep` the
    backward holds h through its scratch, and both sides keep it."""
    pols = ["offload:*", "checkpoint:*"]
    run = run_client("train_lets_go.py", [], pols)
    assert run.ledger_peak == run.allocator_peak == 778_252
    assert {p: (r.predicted, r.measured) for p, r in run.policies.items()} == \
        {"offload:*": (761_868, 761_868), "checkpoint:*": (766_924, 766_924)}
    kept = run_client("train_lets_go.py", ["--keep"], pols)
    assert {p: (r.predicted, r.measured) for p, r in kept.policies.items()} == \
        {"offload:*": (778_252, 778_252), "checkpoint:*": (783_308, 783_308)}
