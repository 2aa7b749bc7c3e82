"""Planted bug (check 4): gradient accumulation whose backward runs in a helper of another
file of the project (micro_steps.py), the loss never scaled by the number of micro-batches.

K = 2 calls of `segment_step` a step, each over a sequence of 3 segments of 4 tokens (2 x 12
tokens, 24 a call), a backward inside the helper after the second segment and after the
third: 4 passes a step, weighing their losses 2/3, 1/3, 2/3, 1/3 (each call its whole mean).

    python helper_accum.py --bug        # scale 1: the gradient is 2x the mean (once no finding)
    python helper_accum.py              # scale K = 2 (no finding)
    python helper_accum.py --whole      # one call a step, its 2 passes (no finding)
    python helper_accum.py --mean [--bug]   # `mean_step`: one cross_entropy mean a call
    python helper_accum.py --heads      # `heads_step`: two heads' means on one batch, summed,
                                        # divided by K: each pass weighs 1 (no finding: one
                                        # target tensor, heads of one batch)
    python helper_accum.py --heads --bug   # undivided: each head weighs 1 a pass (once no
                                           # finding: Note [Heads weighed each])
"""
import sys

import torch
from torch import nn

from micro_steps import heads_step, mean_step, segment_step

BUG = "--bug" in sys.argv
K = 1 if "--whole" in sys.argv else 2
torch.manual_seed(0)
model = nn.Sequential(nn.Embedding(11, 8), nn.Linear(8, 11))
heads = nn.ModuleList([nn.Linear(11, 11), nn.Linear(11, 11)])
params = [*model.parameters(), *heads.parameters()] if "--heads" in sys.argv else \
    model.parameters()
opt = torch.optim.SGD(params, lr=0.1)
for step in range(3):
    for micro in range(K):
        ids = torch.randint(0, 11, (2, 12))
        if "--heads" in sys.argv:
            heads_step(model, heads, ids[0], ids[1], scale=1.0 if BUG else K)
        elif "--mean" in sys.argv:
            mean_step(model, ids[0], ids[1], scale=1.0 if BUG else K)
        else:
            segment_step(model, ids, ids.roll(1, -1), scale=1.0 if BUG else K)
    opt.step()
    opt.zero_grad()
