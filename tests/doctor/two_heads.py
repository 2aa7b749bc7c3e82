"""Planted bug (check 4): gradient accumulation over K = 2 micro-batches of a model with two
heads, each head's mean squared error on targets of its own, summed into one loss a pass
(Note [Heads weighed each] in memledger/doctor/accumulation.py).

    python two_heads.py --bug     # `loss.backward()`: each head's mean weighs 1 in each of
                                  # the 2 passes, the gradient is 2x the mean (once no
                                  # finding: a pass weighed 2 in all)
    python two_heads.py           # `(loss / K).backward()`: each head 1/2 a pass (no
                                  # finding; once "2 whole means": a pass weighed 1)
    python two_heads.py --heads 3 [--bug]   # three heads
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--bug", action="store_true")
ap.add_argument("--heads", type=int, default=2)
args = ap.parse_args()
K = 2
torch.manual_seed(0)
trunk = nn.Sequential(nn.Linear(8, 16), nn.Tanh())
heads = nn.ModuleList([nn.Linear(16, 2) for _ in range(args.heads)])
opt = torch.optim.SGD([*trunk.parameters(), *heads.parameters()], lr=0.1)
for step in range(3):
    for micro in range(K):
        x = torch.randn(4, 8)
        ys = [torch.randn(4, 2) for _ in heads]   # each head's targets, a tensor of its own
        h = trunk(x)
        if args.heads == 2:
            loss = F.mse_loss(heads[0](h), ys[0]) + F.mse_loss(heads[1](h), ys[1])
        else:
            loss = sum(F.mse_loss(head(h), y) for head, y in zip(heads, ys))
        (loss if args.bug else loss / K).backward()
    opt.step()
    opt.zero_grad()
