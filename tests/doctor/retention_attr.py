"""Planted bug (check 6), held by the model: the forward keeps a running sum of its outputs
in a module attribute, with their history.

    python retention_attr.py            # self.seen = self.seen + out
    python retention_attr.py --fixed    # self.seen = self.seen + out.detach()
    python retention_attr.py --list     # self.kept.append(out.sum(0)), as a LightningModule's
                                        # training_step keeps its outputs
"""
import sys

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
LIST = "--list" in sys.argv
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = nn.Linear(8, 2)
        self.seen = torch.zeros(2)
        self.kept = []

    def forward(self, x):
        out = self.fc(x)
        if LIST:
            self.kept.append(out.sum(0).detach() if FIXED else out.sum(0))
        elif FIXED:
            self.seen = self.seen + out.detach().sum(0)
        else:
            self.seen = self.seen + out.sum(0)
        return out


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
