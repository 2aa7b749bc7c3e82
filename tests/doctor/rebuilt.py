"""A fresh model and optimizer every step (a search over settings, a model per task), every
other one with its first layer frozen: nothing wrong, no finding. The dropped models'
parameters die and their ids come back as the next models' (Note [Parameters held weakly]
in memledger/trace/doctor_probe.py): the doctor must not take a new parameter for the dead
one whose id it has, which it did once ("got no gradient", a crash at optimizer.step())."""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=8)
ARGS = p.parse_args()

torch.manual_seed(0)
for step in range(ARGS.steps):
    model = nn.Sequential(nn.Linear(16, 16), nn.ReLU(), nn.Linear(16, 1))
    if step % 2:
        model[0].requires_grad_(False)
    opt = torch.optim.SGD([q for q in model.parameters() if q.requires_grad], lr=0.1)
    x = torch.randn(8, 16)
    model(x).square().mean().backward()
    opt.step()
    opt.zero_grad()
    del model, opt
