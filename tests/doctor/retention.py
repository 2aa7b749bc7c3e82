"""Planted bug (check 6): the running loss keeps every step's autograd graph.

    python retention.py                # total_loss += loss
    python retention.py --bug list     # losses.append(loss)
    python retention.py --fixed        # total_loss += loss.item()
"""
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "sum"
FIXED = "--fixed" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
total_loss = 0.0
losses = []
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if FIXED:
        total_loss += loss.item()
    elif BUG == "list":
        losses.append(loss)
    else:
        total_loss += loss
