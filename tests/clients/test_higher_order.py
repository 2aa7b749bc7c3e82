"""A higher-order operator in a traced script (tests/clients/train_hop.py: flex_attention
in an evaluation under no_grad): the collector runs it by its ops (Note [Higher-order
operators run by their ops], memledger/trace/higher_order.py)."""

from tests.clients.harness import assert_pinned, fake_client_gaps, run_client


def test_flex_attention_is_traced_by_its_ops_and_explains_the_allocator():
    """Before: the ledger pass failed, exit 3 ("There was no rule registered for
    HigherOrderOperator flex_attention and mode <...Collector...>"), as `memledger trace`
    did, where the script runs fine. Now the peak is flex_attention's unfused reference in
    step 2's evaluation: its (1, 1, 256, 256) float32 scores, 262,144 B each (the matmul's
    scaled copy and the two `where`s of the causal score_mod), three live at once; with
    the kernel scratch the ledger explains the allocator's peak, a policy predicts what
    it measures (the peak is in the evaluation, which no policy touches), and the fake
    ledger equals the real one."""
    run = run_client("train_hop.py", [], ["offload:*"], steps=2)
    assert run.ledger_peak == 833_733
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=897_716)
    pk = run.ledger.peak()
    assert (pk.step, pk.op) == (2, "where.self")
    live = run.ledger.live_at(pk.event)
    assert sorted(live[live["shape"] == "1x1x256x256"]["op"]) == \
        ["mul.Tensor", "where.self", "where.self"]
    # Note [A compile by the eager backend]: torch ran the eager flex_attention through
    # a graph of the eager backend in the allocator pass; that is no compiled run (the
    # summary said compiled, `show` "this ledger is the EAGER run", before)
    assert [(r["frames"] > 0, r["aot"]) for r in run.ledger.extra["compiles"]] == [(True, 0)]
    assert not run.summary.compiled
    p = run.policies["offload:*"]
    assert p.predicted == p.measured == run.allocator_peak
    assert fake_client_gaps("train_hop.py", [], ["offload:*"]) == {}
