"""The script's own checkpoint of a call whose re-run stops before its first op
(tests/clients/train_own_early_stop.py: a two-tower scorer that checkpoints its user-table
lookup itself). Note [A re-run of the script's that stops before its first op]
(trace/collector.py). Measured by the helper fix52c, 2026-12-07, torch 2.13.0 CPU, AMD EPYC
(AVX2), one intra-op thread, 1 step."""

from tests.clients.harness import run_client


def test_the_fork_of_a_rerun_that_stops_before_its_first_op_is_in_the_ledger():
    """The user rows' re-run forks the generator's state (5,056 B) at the unpack of their
    ids and stops at their pack before any op: no op ran under the re-run's hook, and the
    ledger recorded no fork. Before: the ledger 18,696 B against the allocator's 21,192 B
    (the fork, less the 2,560 B gradient the next op makes, sets the peak), and
    `checkpoint:tower` predicted 26,248 B against 25,224 B measured (predict carried the
    2,496 B the ledger missed on every policy). Now the fork has an event of its own."""
    pols = {"checkpoint:tower": 25_224, "selective:tower": 27_272, "offload:tower": 19_144}
    run = run_client("train_own_early_stop.py", [], list(pols), steps=1)
    assert run.ledger_peak == run.ledger.peak_with_scratch() == run.allocator_peak == 21_192
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak


def test_a_policy_that_peaks_at_that_fork_is_predicted_with_it():
    """A wider item tower (`--hidden 64`) peaks elsewhere, and the ledger was right at its
    peak; `checkpoint:tower.2` moves its peak to the user rows' fork: 35,336 B predicted
    against 35,656 B measured before."""
    run = run_client("train_own_early_stop.py", ["--hidden", "64"], ["checkpoint:tower.2"],
                     steps=1)
    assert run.ledger_peak == run.allocator_peak == 33_352
    p = run.policies["checkpoint:tower.2"]
    assert p.predicted == p.measured == 35_656
