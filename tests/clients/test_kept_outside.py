"""A storage an offloaded call and a node outside it both save, in a graph the script keeps
past its backward (tests/clients/train_kept_outside.py). Note [An outside node a kept graph
holds on] (replay/engine.py). Measured by the helper fix52c, 2026-12-07, torch 2.13.0 CPU,
AMD EPYC (AVX2), one intra-op thread, 2 steps."""

from tests.clients.harness import assert_pinned, run_client


def test_the_outside_node_of_a_kept_graph_holds_the_storage_until_the_graph_goes():
    """`offload:inner` writes `h` (8 x 64 fp32, 2,048 B) off for the Linear's save; the
    gate's node keeps the original, and with `retain_graph=True` it keeps it until the
    script drops the loss, past Adam's step where the second step peaks. The replay let
    it go as the gate's node returned: 123,740 B predicted against 125,788 B measured;
    `offload:inner+offload:head` 121,692 against 123,740."""
    pols = {"offload:inner": 125_788, "offload:inner+offload:head": 123_740,
            "offload:act": 123_740}
    run = run_client("train_kept_outside.py", [], list(pols))
    assert run.ledger_peak == 125_776
    assert run.ledger.peak_with_scratch() == run.allocator_peak
    assert_pinned(run.allocator_peak, avx2=125_788)
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured
        assert_pinned(run.policies[policy].measured, avx2=peak)
