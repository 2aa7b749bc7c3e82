"""A recurrent state a model hands back with its output, carried into the next step and
kept across it by `backward(retain_graph=True)` (check `cross_step_retention`; Note [A
state a call hands back], memledger/doctor/source.py).

    python carried_retained.py            # `out, h = model(x, h)`: every step's backward
                                          # runs through every earlier step's graph again
    python carried_retained.py --fixed    # h detached where each step begins
"""
import argparse

import torch
from torch import nn


class Cell(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(8, 8)
        self.register_buffer("decay", torch.full((8,), 0.5))

    def forward(self, x, h):
        h = torch.tanh(self.inp(x) + h * self.decay)   # the forward's own `h`
        return h.sum(-1), h


p = argparse.ArgumentParser()
p.add_argument("--fixed", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()

torch.manual_seed(0)
model = Cell()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
h = torch.zeros(2, 8)
for step in range(ARGS.steps):
    x = torch.randn(2, 8)
    if ARGS.fixed:
        h = h.detach()
    out, h = model(x, h)
    out.pow(2).mean().backward(retain_graph=True)
    opt.step()
    opt.zero_grad()
