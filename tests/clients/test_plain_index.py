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
