"""torch's fused AdamW (transformers' Trainer default since torch 2.8) updates parameters
without bumping their version counters.

    python fused_adamw.py            # no finding: every step moves the parameters
    python fused_adamw.py --bug      # lr=0: no step moves any parameter (no_update)
"""
import sys

import torch
from torch import nn

BUG = "--bug" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.AdamW(model.parameters(), lr=0.0 if BUG else 1e-3, fused=True)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    opt.zero_grad()
