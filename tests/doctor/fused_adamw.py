"""torch's fused AdamW (transformers' Trainer default since torch 2.8) updates parameters
without bumping their version counters.

    python fused_adamw.py            # no finding: every step moves the parameters
    python fused_adamw.py --bug      # lr=0: no step moves any parameter (no_update)
    python fused_adamw.py --warmup   # a linear warm-up from lr 0 (transformers' default,
                                     # the Trainer's fused AdamW): step 1 moves nothing on
                                     # purpose (once a no_update warning)
"""
import sys

import torch
from torch import nn

BUG = "--bug" in sys.argv
WARMUP = "--warmup" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.AdamW(model.parameters(), lr=0.0 if BUG else 1e-3, fused=True)
sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / 2) if WARMUP else 1.0)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    nn.functional.cross_entropy(model(x), y).backward()
    opt.step()
    sched.step()
    opt.zero_grad()
