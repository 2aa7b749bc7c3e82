"""Planted bug (check 4): gradient accumulation over K = 2 micro-batches with a loss module
that calls no `torch.nn.functional` loss (a library's own, as `CharbonnierLoss` is written:
a mean of sqrt((pred - y)^2 + eps^2) by hand; Note [A loss module of its own] in
memledger/trace/doctor_probe.py).

    python own_loss.py --bug     # `loss.backward()`: the gradient is 2x the mean (once no
                                 # finding: the loss was never recorded)
    python own_loss.py           # `(loss / K).backward()` (no finding)
    python own_loss.py --function [--bug]   # the loss as a function in a helper file,
                                 # loss_fn.py (the bug once no finding: Note [A loss
                                 # function of its own])
"""
import sys

import torch
from torch import nn

from loss_fn import charbonnier_loss

K = 2
BUG = "--bug" in sys.argv


class CharbonnierLoss(nn.Module):
    """A smooth L1: the mean of sqrt(d^2 + eps^2), with no torch.nn.functional loss."""

    def __init__(self, eps: float = 1e-3):
        super().__init__()
        self.eps = eps

    def forward(self, pred, target):
        return torch.sqrt((pred - target) ** 2 + self.eps ** 2).mean()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 2))
criterion = charbonnier_loss if "--function" in sys.argv else CharbonnierLoss()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    for micro in range(K):
        x, y = torch.randn(4, 8), torch.randn(4, 2)
        loss = criterion(model(x), y)
        (loss if BUG else loss / K).backward()
    opt.step()
    opt.zero_grad()
