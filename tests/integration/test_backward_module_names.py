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


class _Twice(torch.autograd.Function):
    """Saves nothing, so its backward unpacks nothing."""

    @staticmethod
    def forward(ctx, x):
        return x * 2

    @staticmethod
    def backward(ctx, g):
        return g * 2


class _Halves(nn.Module):
    """Closes as lucidrains' ReversibleSequence does: `stack(y.chunk(2)).sum(0)`."""

    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 32)

    def forward(self, x):
        y = _Twice.apply(self.lin(x))
        return torch.stack(y.chunk(2, dim=-1)).sum(dim=0)


class _HalvesThenNorm(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.halves, self.norm = _Halves(), nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(self.halves(x))


def test_a_node_that_unpacks_nothing_is_named_by_the_module_that_made_it():
    """Note [The module that made a node] (trace/node_makers.py): the `chunk`'s node (its
    input's gradient, a `cat`) and the custom Function's (`g * 2`) unpack nothing; both
    read "norm", the module whose save the node before them unpacked, before."""
    from memledger.ledger.summary import summarize

    torch.manual_seed(0)
    m, x = _HalvesThenNorm(), torch.randn(8, 16)
    with memledger.trace() as led:
        m(x).sum().backward()
    st = led.storages
    bw = st[st["phase"] == "backward"].sort_values("created")
    assert list(zip(bw["op"], bw["module"], bw["bytes"])) == [
        ("native_layer_norm_backward.default", "norm", 512),
        ("native_layer_norm_backward.default", "norm", 64),
        ("native_layer_norm_backward.default", "norm", 64),
        ("cat.default", "halves", 1024),        # the chunk's node
        ("mul.Tensor", "halves", 1024),         # _Twice's node
        ("mm.default", "halves.lin", 2048),     # the Linear's node unpacks its input
        ("sum.dim_IntList", "halves.lin", 128)]
    s = summarize(led)
    assert (s.peak.bytes, s.peak.module) == (6152, "halves.lin")
    rows = [(r.bytes, r.category, r.module, r.op) for r in s.top_tensors]
    assert (1024, "temporary", "halves", "mul.Tensor") in rows   # live at the peak


class _Block(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.lin = nn.Linear(16, 16)

    def forward(self, x):
        return self.lin(x).relu()


class _CheckpointsItsBlock(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.blk = _Block()

    def forward(self, x):
        return torch.utils.checkpoint.checkpoint(self.blk, x * 2, use_reentrant=False)


def test_a_node_is_named_by_its_maker_before_the_saves_it_unpacks():
    """Note [The module of a backward op]: where a node unpacks a save, its maker's module
    still wins. The script's own checkpoint: the region's first node (the ReLU's) unpacks
    the region's input, saved by the root's call that ran `checkpoint`, to re-run `blk`
    (its ops named by the calls the re-run makes); its own saves it unpacks unseen. Before:
    the ReLU's gradient and the Linear's three (after it, unpacking nothing seen) read ""
    (the root, that input's saver)."""
    torch.manual_seed(0)
    m, x = _CheckpointsItsBlock(), torch.randn(8, 16, requires_grad=True)
    with memledger.trace() as led:
        m(x).sum().backward()
    st = led.storages
    bw = st[st["phase"] == "backward"].sort_values("created")
    assert list(zip(bw["op"], bw["module"], bw["bytes"])) == [
        ("fork_rng", "blk.lin", 5056),   # the re-run: the CPU generator's state, then
        ("addmm.default", "blk.lin", 512),   # the Linear and the ReLU again
        ("relu.default", "blk", 512),
        ("threshold_backward.default", "blk", 512),   # the ReLU's node
        ("mm.default", "blk.lin", 512),               # the Linear's node
        ("mm.default", "blk.lin", 1024),
        ("sum.dim_IntList", "blk.lin", 64),
        ("mul.Tensor", "", 512)]   # `x * 2`, made in the root's call
