"""Rule 11 of Note [Fake runs] for `torch.bernoulli(p, out=mask)` into a tensor of
another dtype (Note [Bernoulli draws into a bool tensor], memledger/trace/fake.py)."""

import memledger


def test_fake_bernoulli_into_a_bool_mask_runs_as_the_kernel_does():
    """tensorly-torch's tensor dropout draws the ranks it keeps with `torch.bernoulli(
    torch.ones(rank) * (1 - p), out=torch.empty(rank, dtype=torch.bool))` and indexes the
    factors with the mask. The real kernel draws in place into the bool tensor; torch's
    fake kernel refused the float32 -> bool cast, and the fake run raised where the real
    one trains. Both runs now ledger the same rows: the (12,) float32 probabilities
    (48 B, twice: `ones` and the product), the (5,) bool out (5 B) and the (12,) storage
    the kernel grows it into (12 B, a row of its own: Note [Storages grown inside an
    op])."""
    import torch

    got = {}
    for fake in (False, True):
        torch.manual_seed(0)
        with memledger.trace(fake=fake) as led:
            factor = torch.nn.Parameter(torch.randn(6, 12))
            keep = torch.bernoulli(torch.ones(12) * 0.7,
                                   out=torch.empty(5, dtype=torch.bool))
            idx = torch.arange(12)[torch.ones(12, dtype=torch.bool)]   # every column
            (factor[:, idx] * keep).sum().backward()
        st = led.storages
        rows = st[st["op"].str.startswith(("resize", "empty", "mul", "ones"))]
        got[fake] = (sorted(zip(rows["op"], rows["shape"], rows["bytes"])), led.peak().bytes,
                     keep.shape, keep.dtype)
    assert got[True] == got[False]
    rows = got[True][0]
    assert {("empty.memory_format", "5", 5), ("mul.Tensor", "12", 48),
            ("ones.default", "12", 48), ("resize_", "12", 12)} <= set(rows)
    assert got[True][2:] == (torch.Size([12]), torch.bool)
