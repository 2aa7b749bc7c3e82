"""A constant tensor a module keeps as a plain attribute (tests/clients/train_plain_index.py):
model state, named and counted as a registered buffer is (Note [A tensor a module holds
unregistered], trace/collector.py)."""

from tests.clients.harness import run_client


def test_an_unregistered_index_reads_as_the_registered_buffer_does():
    """Each block's (32, 32) int64 index (8,192 B), a plain attribute made at init and saved
    by `index` in every forward, read "activation" with no name: 24,576 B of activation at
    the peak and 32,768 B saved for backward, against 8,192 and 16,384 with `--buffer`. Now
    both read alike, the index a buffer named `0.idx`; the predictions are unchanged."""
    pols = {"checkpoint:*": 90_440, "offload:*": 71_172}
    runs = [run_client("train_plain_index.py", argv, list(pols)) for argv in ([], ["--buffer"])]
    for run in runs:
        assert run.ledger_peak == run.allocator_peak == 78_632
        for policy, peak in pols.items():
            assert run.policies[policy].predicted == run.policies[policy].measured == peak
        s = run.summary
        assert (s.at_peak["buffer"], s.at_peak["activation"]) == (16_384, 8_192)
        assert s.activations.saved_bytes == 16_384
    st = runs[0].ledger.storages
    assert sorted(st.loc[st["category"] == "buffer", "name"]) == ["0.idx", "1.idx"]


def test_a_constant_held_unregistered_stays_on_the_device_under_offload():
    """`--calls 3`: the model applied to its own output three times a step, each block's
    index saved by `index` in each call. Offload left a registered buffer in place but
    wrote the plain attribute out and read it back, a copy held from the first of its
    three unpacks to the last: `offload:*` measured 95,496 B against 79,112 predicted,
    `offload:0` 95,528 against 93,192 (Note [A constant a module holds, left on the
    device], measure/apply.py). Now both read as with `--buffer`, to the byte."""
    pols = {"checkpoint:*": 131_144, "offload:*": 79_112, "offload:0": 93_192}
    for argv in (["--calls", "3"], ["--calls", "3", "--buffer"]):
        run = run_client("train_plain_index.py", argv, list(pols))
        assert run.ledger_peak == run.allocator_peak == 115_496
        for policy, peak in pols.items():
            assert run.policies[policy].predicted == run.policies[policy].measured == peak
