"""Planted bug (check 1): the first block's output is detached, so block 0 gets no gradient.
`--fixed`: no detach."""
import sys

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        h = torch.relu(self.blocks[0](x))
        if not FIXED:
            h = h.detach()  # BUG: cuts blocks.0 off the loss
        h = torch.relu(self.blocks[1](h))
        return self.head(h)


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
