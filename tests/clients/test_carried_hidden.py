"""Offload of a storage saved again after its first read-back (tests/clients/
train_carried_hidden.py: truncated BPTT, the carried hidden state not detached, each
chunk's backward with `retain_graph=True`)."""

from tests.clients.harness import run_client


def test_a_carried_state_saved_again_is_read_back_in_a_round_of_its_own():
    """Chunk 0's layer saves `h` (by `exp` and its `out` Linear), chunk 0's backward reads
    it back and lets the copy go, chunk 1's call saves `h[:, -1:]` again (`prev.log()`),
    and chunk 1's backward reads it back in a second round (and `exp`'s save again). Before
    (Note [Saved again after its read-back], replay/engine.py; Note [Saved again by the
    next chunk's forward], trace/collector.py): `offload:layers.*` predicted 44,076 B
    against 42,540 B measured, one copy of `h` (4 x 8 x 16 fp32, 2,048 B) held from the
    first read-back through chunk 1's forward, and the original held by the script to the
    step's end. Now both 42,540 B."""
    pols = {"offload:layers.*": 42_540, "checkpoint:layers.*": 69_484}
    run = run_client("train_carried_hidden.py", ["--case", "log,exp"], list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 56_620
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
