"""Note [The module of a backward op] (trace/collector.py): a backward op is named by the
module of the save its node unpacked, not by the last module that saved the storage."""

from __future__ import annotations

import torch
import torch.nn as nn

import memledger


class _Scale(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.ones(()))

    def forward(self, x, e):
        return x * e * self.w          # `x * e` saves e (and x)


class _Two(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.a, self.b = _Scale(), _Scale()

    def forward(self, x, e):
        return self.b(self.a(x, e), e)   # e, saved by a and by b, as a UNet's text states


def test_a_storage_two_modules_saved_names_each_nodes_ops_by_its_own_saver():
    m, x, e = _Two(), torch.randn(256, requires_grad=True), torch.randn(256)
    with memledger.trace() as led:
        m(x, e).sum().backward()
    st = led.storages
    bw = st[st["phase"] == "backward"].sort_values("created")
    # b's nodes, then a's; the last, a's `x * e` node making x's gradient from e (1,024 B),
    # read "b", e's last saver, before
    assert bw["module"].tolist() == ["b"] * 4 + ["a"] * 4
    assert bw["bytes"].tolist()[-1] == 1024


def test_every_backward_pass_starts_named_by_no_module():
    """Note [A backward pass's first nodes]: the loss's own nodes (`mean`, `/ 2`) unpack no
    module's save; the second pass named them by the first pass's last unpack, "a"."""
    m, e = _Two(), torch.randn(256)
    with memledger.trace() as led:
        for _ in range(2):   # two micro-batches, as an accumulating loop runs them
            x = torch.randn(256, requires_grad=True)
            (m(x, e).mean() / 2).backward()
    st = led.storages
    bw = st[st["phase"] == "backward"].sort_values("created")
    first = [(op, mod) for op, mod in zip(bw["op"], bw["module"])]
    assert len(first) == 20
    assert first[:2] == first[10:12] == [("div.Tensor", ""), ("div.Scalar", "")]
    assert bw["bytes"].tolist()[10:12] == [4, 1024]
    assert first[:10] == first[10:]
