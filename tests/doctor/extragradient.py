"""Extragradient on a Lagrangian, as cooper's ExtrapolationConstrainedOptimizer runs it: a
model and a multiplier, each with its own optimizer; per step the primal Lagrangian's
backward (the model's parameters) and the dual one's (the multiplier's), an extrapolation
that moves both along their gradients and zeroes them, the same two backward passes at the
extrapolated point, and the step from the saved weights.

    python extragradient.py                   # no finding (4 of 8 backward passes once read
                                              # as dropped_update: no step() used them)
    python extragradient.py --in-place        # the move by `p.sub_` under no_grad, not `.data`
    python extragradient.py --no-extrapolation  # the bug: the first gradients are zeroed
                                              # unused (dropped_update)
"""
import sys

import torch
from torch import nn

DATA = "--in-place" not in sys.argv
EXTRAPOLATE = "--no-extrapolation" not in sys.argv
torch.manual_seed(0)

model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
lam = nn.Parameter(torch.zeros(1))
primal = torch.optim.SGD(model.parameters(), lr=0.1)
dual = torch.optim.SGD([lam], lr=0.1, maximize=True)
params = [*model.parameters(), lam]


def backward_both(x, y):
    logits = model(x)
    g = logits.softmax(-1)[:, 1].mean() - 0.3   # the rate constraint g <= 0
    (nn.functional.cross_entropy(logits, y) + lam.detach() * g).sum().backward()
    (lam * g.detach()).sum().backward()


@torch.no_grad()
def extrapolate():
    saved = []
    for p in params:
        sign = -1.0 if p is lam else 1.0   # the multiplier ascends
        saved.append(p.data.clone())
        if not EXTRAPOLATE:
            continue
        if DATA:
            p.data.add_(p.grad, alpha=-0.1 * sign)   # cooper's ExtraSGD
        else:
            p.sub_(p.grad, alpha=0.1 * sign)
    return saved


for step in range(4):
    x, y = torch.randn(8, 8), torch.randint(0, 2, (8,))
    backward_both(x, y)
    saved = extrapolate()
    primal.zero_grad()
    dual.zero_grad()
    backward_both(x, y)
    with torch.no_grad():
        for p, s in zip(params, saved):
            p.copy_(s)
    primal.step()
    dual.step()
    primal.zero_grad()
    dual.zero_grad()
