"""Planted bug (check 4): gradient accumulation over K = 2 sequences a step, each run by a
recurrent model in S = 2 segments, the state carried, each segment's targets a tensor of its
own (not slices of one), the sequence's loss the mean of its segments' (Note [Segments are
no heads] in memledger/doctor/accumulation.py).

    python segments.py --bug     # `loss.backward()`: each sequence weighs 1 in all, the
                                 # gradient is 2x the mean (once no finding: its segments
                                 # read as heads, 1/2 each)
    python segments.py           # `(loss / K).backward()` (no finding)
    python segments.py --segments 3 [--bug]
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--bug", action="store_true")
ap.add_argument("--segments", type=int, default=2)
args = ap.parse_args()
K, S = 2, args.segments


class Recurrent(nn.Module):
    def __init__(self):
        super().__init__()
        self.inp, self.rec, self.out = nn.Linear(4, 8), nn.Linear(8, 8), nn.Linear(8, 2)

    def forward(self, x, h):
        h = torch.tanh(self.inp(x) + self.rec(h))
        return self.out(h), h


torch.manual_seed(0)
model = Recurrent()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    for micro in range(K):
        xs = [torch.randn(3, 4) for _ in range(S)]   # a sequence's segments
        ys = [torch.randn(3, 2) for _ in range(S)]   # their targets, tensors of their own
        h, loss = torch.zeros(3, 8), 0.0
        for x, y in zip(xs, ys):
            pred, h = model(x, h)
            loss = loss + F.mse_loss(pred, y) / S
        (loss if args.bug else loss / K).backward()
    opt.step()
    opt.zero_grad()
