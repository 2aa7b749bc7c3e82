"""A call made inside a backward, read by many passes, beside the forward's call of the same
module (tests/clients/train_implicit_backward.py: a deep equilibrium layer trained by
implicit differentiation, as torchdeq does it, in plain torch)."""

from tests.clients.harness import assert_pinned, run_client


def test_a_weight_the_backwards_own_call_saves_for_many_passes_refuses_nothing():
    """The cell's weight `w2` (computed once per forward from `v2` and `g2`) is saved by the
    forward's call of the cell at z* and by the call the implicit Function's backward makes,
    whose save 4 `autograd.grad` passes read. A policy acts on the forward's call alone (Note
    [A region called inside backward], measure/apply.py), whose saves the loss's backward
    reads once. Before (Note [Read many times through another call's save],
    replay/engine.py), predict refused all three policies ("whose saves 4 backward passes
    read"), which measure ran (`checkpoint:cell` 34,216, `offload:cell` 31,664 and
    `selective:cell` 34,728 B); now each is priced as measured (the test takes the
    first)."""
    pols = {"checkpoint:cell": 34_216}
    run = run_client("train_implicit_backward.py", ["--iters", "4"], list(pols))
    assert run.ledger_peak == 31_652
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=31_664)
    for policy, peak in pols.items():
        p = run.policies[policy]
        assert p.predict_refusal == p.measure_refusal == ""
        assert p.predicted == p.measured
        assert_pinned(p.measured, avx2=peak)
