"""Gradients that are None or zero as backward made them: not cleared, so not
`zeroed_before_step`.

    python custom_function.py --bug     # a custom autograd.Function returns None for `w`
    python custom_function.py --fixed   # it returns w's gradient
    python custom_function.py --hinge   # a hinge loss whose margins are all met: every
                                        # gradient is exactly zero, as computed (no finding)
    python custom_function.py --hinge --clip   # the same, clipped in place before the
                                        # step, and stepped by Adam (no finding)
"""
import sys

import torch
from torch import nn

BUG, HINGE, CLIP = "--bug" in sys.argv, "--hinge" in sys.argv, "--clip" in sys.argv
torch.manual_seed(0)


class MyLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, w):
        ctx.save_for_backward(x, w)
        return x @ w.t()

    @staticmethod
    def backward(ctx, g):
        x, w = ctx.saved_tensors
        return g @ w, None if BUG else g.t() @ x


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(16, 8) * 0.1)
        self.out = nn.Linear(16, 2)

    def forward(self, x):
        return self.out(torch.relu(MyLinear.apply(x, self.w)))


model = Net()
opt = (torch.optim.Adam if CLIP else torch.optim.SGD)(model.parameters(), lr=1e-3)
for step in range(3):
    x = torch.randn(4, 8)
    if HINGE:   # the margin is met by construction: relu(-1 - |score|) is 0 everywhere
        loss = torch.relu(-1 - model(x).abs()).sum()
    else:
        loss = nn.functional.cross_entropy(model(x), torch.randint(0, 2, (4,)))
    opt.zero_grad()
    loss.backward()
    if CLIP:   # scales every gradient in place: a zero one stays zero, at a new version
        nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    opt.step()
