"""Blocks a custom autograd Function runs under no_grad in forward and again, with gradients,
inside its backward (the way transformers' Reformer re-makes its reversible layers' inputs).
No policy acts on such calls (Note [A region called inside backward], measure/apply.py).

    python tests/clients/train_rerun.py --steps 3
    memledger predict run.ledger -p 'checkpoint:blocks.*'    # says no call is acted on
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn


class ReRun(torch.autograd.Function):
    """y = block(x) with nothing saved but x; backward runs the block again."""

    @staticmethod
    def forward(ctx, x, block):
        ctx.block = block
        ctx.save_for_backward(x)
        with torch.no_grad():
            return block(x)

    @staticmethod
    def backward(ctx, g):
        (x,) = ctx.saved_tensors
        x = x.detach().requires_grad_()
        with torch.enable_grad():
            y = ctx.block(x)
        y.backward(g, retain_graph=True)   # as Reformer does: its graph lives until return
        return x.grad, None


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inp = nn.Linear(16, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))
            for _ in range(2))
        self.head = nn.Linear(width, 4)

    def forward(self, x):
        h = self.inp(x)
        for b in self.blocks:
            h = ReRun.apply(h, b)
        return self.head(h)


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--width", type=int, default=64)
a = p.parse_args()
torch.manual_seed(0)
model = Net(a.width)
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
gen = torch.Generator().manual_seed(1)
for step in range(a.steps):
    x = torch.randn(256, 16, generator=gen)
    y = torch.randint(0, 4, (256,), generator=gen)
    loss = F.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
