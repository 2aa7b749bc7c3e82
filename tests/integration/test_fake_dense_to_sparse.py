"""`--fake` and a sparse tensor made from a dense one (Note [A sparse tensor made from a
dense one], memledger/trace/fake_sparse.py): plain torch, real against fake in-process."""

from __future__ import annotations

import pytest

import memledger
from memledger.ledger.fake_info import fake_info

BOUND = "upper bound: every element"


def _convert(layout: str, dense):
    return dense.to_sparse_csr() if layout == "csr" else dense.to_sparse()


def _run(layout: str, fake: bool, unknown: bool):
    import torch

    torch.manual_seed(0)
    with memledger.trace(fake=fake) as led:
        if unknown:   # a parameter's: values the fake run does not keep, every one nonzero
            w = torch.nn.Linear(64, 1, bias=False).weight.detach()
            dense = (w.expand(64, 64) < 2).float()
            del w
        else:         # drawn token ids: values Rule 3 keeps, 378 of 4,096 nonzero
            dense = (torch.randint(0, 10, (64, 64)) == 0).float()
        (_convert(layout, dense) @ torch.ones(64, 8)).sum()
    return led


@pytest.mark.parametrize("layout, peak", [("coo", 102_400), ("csr", 102_920)])
def test_fake_sparse_from_unknown_dense_is_its_upper_bound_and_said(layout, peak):
    """The dense input's values are unknown to the fake run: its stand-in was zeros, so
    the sparse result had no entries and its indices and values read 0 B, nothing said
    (fake peak 20,480 B against the real 102,400 for COO, 21,000 against 102,920 for CSR).
    Now every element is an entry (the count's upper bound, which this mask reaches: each
    of its 4,096 elements is nonzero) and the line is a stand-in."""
    real, fake = _run(layout, False, True), _run(layout, True, True)
    assert real.peak().bytes == fake.peak().bytes == peak
    assert fake.at_peak() == real.at_peak()
    op = "aten._to_sparse_csr.default" if layout == "csr" else "aten._to_sparse.default"
    assert [(s.op, s.value) for s in fake_info(fake.ledger).standins] == [(op, BOUND)]


@pytest.mark.parametrize("layout, peak", [("coo", 36_864), ("csr", 36_864)])
def test_fake_sparse_from_known_dense_is_the_real_count(layout, peak):
    """Known values (Rule 3's shadow of drawn ids): the twin is made from them, the real
    run's 378 entries, and no stand-in is said."""
    real, fake = _run(layout, False, False), _run(layout, True, False)
    assert real.peak().bytes == fake.peak().bytes == peak
    assert fake_info(fake.ledger).standins == []


def test_fake_sparse_from_a_large_unknown_dense_says_its_entries_read_zero():
    """Over BOUND_NUMEL elements the twin keeps no entries (one of every element would
    hold 12 B an element of host memory), and the line says its entries read 0."""
    import torch

    with memledger.trace(fake=True) as led:
        torch.randn(1025, 1024).to_sparse_csr()
    [said] = fake_info(led.ledger).standins
    assert said.op == "aten._to_sparse_csr.default" and said.value.startswith("nnz 0:")
