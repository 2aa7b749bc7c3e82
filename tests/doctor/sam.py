"""SAM (sharpness-aware minimization, as davda54/sam writes it): two forward/backward
passes per step. The first gradient moves the weights to a nearby worst point and is
zeroed; the second, taken there, feeds the base optimizer's step.

    python sam.py                # no finding (the first backward once read as dropped_update:
                                 # no optimizer.step() consumed it, a zero_grad cleared it)
    python sam.py --no-ascent    # the bug: first_step zeroes the gradient without using it
                                 # (dropped_update: half the backward passes are wasted)
    python sam.py --no-zero      # the bug: first_step(zero_grad=False), so the step uses the
                                 # gradient at w plus the one at the perturbed w (mixed_gradient)
"""
import sys

import torch
from torch import nn

ASCENT = "--no-ascent" not in sys.argv
ZERO = "--no-zero" not in sys.argv
torch.manual_seed(0)


class SAM(torch.optim.Optimizer):
    def __init__(self, params, base_optimizer, rho=0.05, **kwargs):
        super().__init__(params, dict(rho=rho, **kwargs))
        self.base_optimizer = base_optimizer(self.param_groups, **kwargs)
        self.param_groups = self.base_optimizer.param_groups

    @torch.no_grad()
    def first_step(self, zero_grad=False):
        grads = [p.grad.norm(2) for g in self.param_groups for p in g["params"]
                 if p.grad is not None]
        norm = torch.norm(torch.stack(grads), 2)
        for group in self.param_groups:
            scale = group["rho"] / (norm + 1e-12)
            for p in group["params"]:
                if p.grad is None:
                    continue
                self.state[p]["old_p"] = p.data.clone()
                if ASCENT:
                    p.add_(p.grad * scale.to(p))
        if zero_grad:
            self.zero_grad()

    @torch.no_grad()
    def second_step(self, zero_grad=False):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.data = self.state[p]["old_p"]   # back to the weights before the ascent
        self.base_optimizer.step()
        if zero_grad:
            self.zero_grad()


model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = SAM(model.parameters(), torch.optim.SGD, lr=0.1, momentum=0.9)
for step in range(4):
    x, y = torch.randn(8, 8), torch.randint(0, 2, (8,))
    nn.functional.cross_entropy(model(x), y).backward()
    opt.first_step(zero_grad=ZERO)
    nn.functional.cross_entropy(model(x), y).backward()
    opt.second_step(zero_grad=True)
