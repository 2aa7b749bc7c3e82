"""Offload of a storage saved again after its first read-back (tests/clients/
train_carried_hidden.py: truncated BPTT, the carried hidden state not detached, each
chunk's backward with `retain_graph=True`)."""

from tests.clients.harness import ledger_pass, predicted_peak, run_client


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


def test_the_second_passs_rerun_of_a_chunk_whose_state_is_carried_is_priced_as_measured():
    """`checkpoint:layers.*` re-runs chunk 0's layer in both backward passes; the second
    re-run starts as chunk 1's backward reads chunk 0's sigmoids, not at chunk 1's `log` of
    the carried state (its own save, of its argument). Before (Note [A dropped storage a
    later call reads in the second pass], replay/engine.py): `--case log` 69,996 B
    predicted against 67,436 B measured, the segment at that `log` read, its copies held
    across chunk 1's layer's backward; `--case lse` (minGRU's log-space scan) 79,536 B
    against 77,488 B, the first re-run's `exp` output (4 x 8 x 16 fp32, 2,048 B) held to
    chunk 1's `log` read. (`--case plain`, a storage only the call saves and only the
    first pass reads: the next test.)"""
    run = run_client("train_carried_hidden.py", ["--case", "log"], ["checkpoint:layers.*"],
                     steps=1)
    assert run.ledger_peak == run.allocator_peak == 56_620
    ran = run.policies["checkpoint:layers.*"]
    assert ran.predicted == ran.measured == 67_436
    run = run_client("train_carried_hidden.py", ["--case", "lse"], ["checkpoint:layers.*"],
                     steps=1)
    assert run.ledger_peak == run.allocator_peak == 79_664
    ran = run.policies["checkpoint:layers.*"]
    assert ran.predicted == ran.measured == 77_488


def test_a_storage_only_the_first_pass_reads_is_priced_as_measured():
    """`--case plain` (`prev * 1.0`): chunk 1 saves nothing of the carried state, so chunk
    0's `h` (its cumsum, 4 x 8 x 16 fp32) is saved by chunk 0's `out` alone and read by
    chunk 0's backward alone, while its sigmoids are read by both passes: torch re-runs
    the layer in each. predict refused `checkpoint:layers.*` ("would re-run layers.0 in
    each of two backward passes", Note [A re-run in each backward pass], replay/engine.py)
    which measure ran (67,444 B). Now `h` places no segment (its reads all come in a
    backward phase before the second pass's: Note [A dropped storage a later call reads in
    the second pass]), and both read 67,444 B (2 steps too). With each chunk's loss kept to
    the optimizer step (`--keep`: chunk 0's `out` node alive through the second re-run,
    whose copy of `h` the frame keeps for it) 73,852 B, as measured."""
    run = run_client("train_carried_hidden.py", ["--case", "plain"], ["checkpoint:layers.*"],
                     steps=1)
    assert run.ledger_peak == run.allocator_peak == 54_324
    ran = run.policies["checkpoint:layers.*"]
    assert ran.predicted == ran.measured == 67_444
    led = ledger_pass("train_carried_hidden.py", ["--case", "plain", "--keep"], steps=1)
    assert predicted_peak(led, "checkpoint:layers.*") == 73_852


def test_a_rerun_in_each_of_n_passes_is_priced_as_measured():
    """`--case plain --chunks 3`: chunk 0's layer is read by three backward passes (its
    chunk's and the two after it, each `retain_graph=True`, a backward phase each), and
    torch's checkpoint re-runs it in each; offload reads it back in each. predict refused
    both ("whose saves 3 backward passes read", Note [Read by three backward passes or
    more], replay/engine.py), which measure ran: 78,404 and 42,812 B. Now the call's
    segment serves its last pass, and each pass between the first and the last is priced
    as the first is (Note [A re-run in each of N backward passes]): both as measured. Four
    chunks with each chunk's loss kept to the step (`--keep`: chunk 0's `out` node keeps a
    copy of its input from each pass's re-run) 116,252 B as measured (110,108 without the
    passes between); two layers over three chunks, `checkpoint:layers.*` 117,396 B,
    `checkpoint:layers.1` 114,772 and `offload:layers.0+checkpoint:layers.1` 90,196, as
    measured."""
    pols = {"checkpoint:layers.*": 78_404, "offload:layers.*": 42_812}
    run = run_client("train_carried_hidden.py", ["--case", "plain", "--chunks", "3"],
                     list(pols), steps=1)
    assert run.ledger_peak == run.allocator_peak == 61_756
    for policy, peak in pols.items():
        assert run.policies[policy].predicted == run.policies[policy].measured == peak
    led = ledger_pass("train_carried_hidden.py", ["--case", "plain", "--chunks", "4", "--keep"],
                      steps=1)
    assert predicted_peak(led, "checkpoint:layers.*") == 116_252
    led = ledger_pass("train_carried_hidden.py", ["--case", "plain", "--chunks", "3", "--depth",
                                                  "2"], steps=1)
    assert [predicted_peak(led, p) for p in ("checkpoint:layers.*", "checkpoint:layers.1",
                                             "offload:layers.0+checkpoint:layers.1")] == [
        117_396, 114_772, 90_196]
