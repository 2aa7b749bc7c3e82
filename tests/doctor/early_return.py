"""A module that returns its input before reading its own parameters (x-unet's first
cross-stage attention residual, handed an empty `history`, returns `x` untouched): the
module ran and its output reached the loss, but its parameters were never read.

    python early_return.py              # no finding: the gate reads its scale
    python early_return.py --bug        # "... or their forward never read them ..."
"""
import sys

import torch
from torch import nn

BUG = "--bug" in sys.argv
torch.manual_seed(0)


class Gate(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.scale = nn.Parameter(torch.ones(d))

    def forward(self, x, history):
        if not history:
            return x
        return x * self.scale + history[-1]


class Net(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.inp = nn.Linear(4, d)
        self.gate = Gate(d)
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        h = self.inp(x)
        h = self.gate(h, [] if BUG else [h])
        return self.head(h)


net = Net()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
for step in range(4):
    x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
    loss = nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
