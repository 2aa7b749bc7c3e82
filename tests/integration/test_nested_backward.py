"""Note [A backward pass run inside a node] (trace/nested_backward.py): a custom Function
whose backward runs `torch.autograd.grad` of its own (torchdiffeq's adjoint, a reentrant
checkpoint) holds what it unpacked until its apply returns, not until the nested pass's
first node runs."""

from __future__ import annotations

import torch
import torch.nn as nn

import memledger


class _Adjoint(torch.autograd.Function):
    """Saves its output and, in backward, takes a vector-Jacobian product through `w`
    (a nested pass), then reads the output again, as `odeint_adjoint`'s backward does."""

    @staticmethod
    def forward(ctx, x, w):
        y = x * 2.0
        ctx.save_for_backward(y, w)
        return y

    @staticmethod
    def backward(ctx, g):
        y, w = ctx.saved_tensors
        with torch.enable_grad():
            z = y.detach().clone().requires_grad_(True)
            gz, gw = torch.autograd.grad((z * w).sin(), (z, w), g)
        return gz * y, gw   # `y` read after the nested pass: the node still holds it


class _Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(64, 32))
        self.head = nn.Linear(32, 3)   # saves y too, as torchcde's readout saves z_T

    def forward(self, x):
        return self.head(_Adjoint.apply(x, self.w))


def test_a_node_running_a_backward_pass_of_its_own_ends_where_its_apply_does():
    torch.manual_seed(0)
    net, x = _Net(), torch.randn(64, 32)
    with memledger.trace() as led:
        net(x).sum().backward()
    st = led.storages
    y = st[(st["phase"] == "forward") & (st["saves"] == 2)]   # by the node and by the head
    assert y["bytes"].tolist() == [8192]
    bw = st[st["phase"] == "backward"]
    # `gz * y`, the last op of the node's apply, made after the nested pass's sin and cos
    last = bw[bw["op"] == "mul.Tensor"]["created"].max()
    assert bw[bw["op"] == "cos.default"]["created"].max() < last
    # its unpack of y ends after that op (event 32); it ended where the nested pass's first
    # node ran before (event 24), and the replay let y go there
    assert int(y["unpack_end_ev"].iloc[0]) == last + 1


def test_a_pass_a_hook_runs_between_two_nodes_leaves_the_node_before_it_alone():
    """A tensor hook's pass (sentence-transformers' GradCache re-runs its mini-batches in
    one) runs after the node that unpacked last has returned: that node is not set aside,
    and its unpack ends where its apply did, not at the next node after the hook."""
    torch.manual_seed(0)
    w, side = nn.Parameter(torch.randn(64, 32)), nn.Parameter(torch.randn(64, 32))

    with memledger.trace() as led:
        aux = (side * 3.0).sin().sum()   # a graph the hook's pass runs: its first op nested
        seed = torch.ones(())

        def hook(g):
            torch.autograd.grad(aux, side, seed, retain_graph=True)
            return g

        h = torch.randn(64, 32) * w
        h.register_hook(hook)   # runs between h.sin()'s node and the mul's
        h.sin().sum().backward()
    st = led.storages
    h = st[(st["op"] == "mul.Tensor") & (st["phase"] != "backward")].sort_values("created")
    aux_sin_read = int(h["unpack_ev"].iloc[0])   # side * 3.0, read by the hook's pass
    # h.sin()'s node (its cos and mul, events 11 and 12) ends at 13, before the hook's pass
    # reads anything; set aside, it ended at the mul's node after the hook (event 18)
    assert int(h["unpack_end_ev"].iloc[-1]) == 13 < aux_sin_read
