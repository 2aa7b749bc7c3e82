"""A tensor a library made at import, read in every step (tests/clients/
train_made_at_import.py): in one process it exists before every pass, and the ledger
leaves it out as the allocator pass does (Note [Storages an in-process caller made before
the script], memledger/trace/collector.py)."""

from tests.clients.harness import run_client


def test_a_tensor_made_at_import_is_outside_both_passes():
    """`PROJECTION` (4,096 B), made when the harness imported the script's imports: the
    ledger pass met it at its first read as made there, outside dispatch, and counted it
    from then on; the allocator pass never saw it allocated. Before: ledger 365,584 B
    against the allocator's 361,488 B, each policy 4,096 B over measured (`offload:*`
    316,688 against 312,592). Now its row is kept, out of the curve, and both read alike."""
    pols = {"checkpoint:[0-2]": 442_192, "offload:*": 312_592}
    run = run_client("train_made_at_import.py", [], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 361_488
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    st = run.ledger.storages
    made = st[st["op"] == "(made before the script)"]
    assert list(made["bytes"]) == [4_096] and bool(made["external"].all())


def test_a_tensor_kept_as_a_default_argument_is_found():
    """A default argument value made at import (a function's, and a keyword-only one of a
    decorated method of an ABC), as flow_matching's discrete sampler keeps its
    `time_grid`: not found before, so the ledger pass met the (2,) float32 at its use and
    read 8 B over the allocator pass on `train_flow_matching.py --mode discrete
    --eval-every 1` (159,568 against 159,560 B); now named to the collector with the
    globals."""
    import inspect

    from tests.clients.harness import _storages_held_by_new_modules
    from tests.clients import defaults_at_import as m

    ptrs = {s.data_ptr() for s in _storages_held_by_new_modules()}
    kept = (m.sample.__defaults__[0],
            inspect.unwrap(m.Solver.sample).__kwdefaults__["grid"])
    assert [t.untyped_storage().data_ptr() in ptrs for t in kept] == [True, True]
