"""A sparse COO filter under `trace --fake` (tests/clients/train_sparse_filter.py, plain
torch): Note [Fake sparse tensors] (memledger/trace/fake_sparse.py), found on
torch-harmonics' DISCO convolution (tests/clients/test_harmonics_clients.py) and pinned
here, where CI runs it without the library."""

from tests.clients.harness import ledger_pass, predicted_peak


def test_a_fake_sparse_filter_has_the_real_runs_entries():
    """A coalesced filter of 40 drawn entries (39 kept; the parts' storages keep 40) made
    in setup, `bmm` with a dense operand, and a sparse operand made each step whose
    `sparse.mm` transposes it in backward. FakeTensorMode's `_coalesce` and sparse `t`
    kept no entries: the fake ledger read the filter's 960 + 160 B as 0, 1,120 B under the
    real peak (6,248 B against 7,368 B), all of it `other`. Now every category and every
    policy's prediction is the real ledger's."""
    real = ledger_pass("train_sparse_filter.py", [])
    fake = ledger_pass("train_sparse_filter.py", [], fake_device="cpu")
    assert real.peak().bytes == fake.peak().bytes == 7_368
    want = {"parameter": 288, "activation": 2_624, "temporary": 2_056, "input": 1_024,
            "other": 1_376}
    for led in (real, fake):
        assert {c: b for c, b in led.at_peak().items() if b} == want
    for policy in ("checkpoint:w", "offload:w"):
        assert predicted_peak(fake, policy) == predicted_peak(real, policy)
