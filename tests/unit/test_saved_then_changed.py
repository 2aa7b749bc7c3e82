"""Note [Saved and then changed] (memledger/trace/collector.py): autograd leaves its
version check out while saved-tensor hooks are installed, so the collector makes it: a
script that fails untraced fails traced, with autograd's words, and one that does not
runs as before."""

from __future__ import annotations

import pytest
import torch

import memledger


def _step(change_saved: bool) -> None:
    torch.manual_seed(0)
    fc1, fc2 = torch.nn.Linear(8, 16), torch.nn.Linear(16, 4)
    opt = torch.optim.SGD([*fc1.parameters(), *fc2.parameters()], lr=0.1)
    h = torch.relu(fc1(torch.randn(4, 8)))   # relu saves its output, h
    if change_saved:
        h[:, :8].mul_(0.5)                   # h changed after it was saved
    fc2(h).sum().backward()
    opt.step()


def test_a_saved_tensor_changed_in_place_fails_traced_as_untraced(tmp_path):
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation") as untraced:
        _step(change_saved=True)
    assert "is at version 1; expected version 0 instead" in str(untraced.value)
    with pytest.raises(RuntimeError, match=r"modified by an inplace operation: "
                       r"\[torch\.FloatTensor \[4, 16\]\] is at version 1; expected "
                       r"version 0 instead \(raised by memledger's saved-tensor hooks"):
        with memledger.trace(tmp_path / "bad.ledger"):
            _step(change_saved=True)


def test_a_tensor_changed_before_it_is_saved_traces(tmp_path):
    with memledger.trace(tmp_path / "ok.ledger") as led:
        _step(change_saved=False)
        # an in-place change before any save, and on a tensor no op saved, are no error
        a = torch.randn(4, 8, requires_grad=True) * 2
        a.add_(1)
        b = a.sum() * 3
        a.mul_(2)          # `sum` saved nothing of `a`
        b.backward()
    assert led.summary().peak.bytes > 0
