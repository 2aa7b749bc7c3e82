"""Planted bugs (check 8): optimizer.step() twice on one backward's gradients.

    --bug copy     a copy-pasted opt.step(): two steps after each backward
    --bug accum    K=2 micro-batches, a step inside the accumulation loop and one after it
    --fixed        one step per backward (with --bug accum: one after the loop)
"""
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "copy"
FIXED = "--fixed" in sys.argv
K = 2 if BUG == "accum" else 1
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
for step in range(4):
    for micro in range(K):
        x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
        loss = nn.functional.cross_entropy(model(x), y) / K
        loss.backward()
        if BUG == "accum" and not FIXED:
            opt.step()                      # a step per micro-batch ...
    opt.step()                              # ... and one after the loop
    if BUG == "copy" and not FIXED:
        opt.step()
    opt.zero_grad()
