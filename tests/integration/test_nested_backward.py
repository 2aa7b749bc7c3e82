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
