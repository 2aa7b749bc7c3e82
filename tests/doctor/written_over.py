"""Planted bug (check 5, dropped_update): each step's gradients written over before the step
by values made from none of them (Note [A gradient written over] in
memledger/trace/doctor_folded.py).

    python written_over.py --write noise   # `p.grad = torch.randn_like(p)`: every pass
                                           # dropped, 3 of 3 (once no finding)
    python written_over.py --write copy    # `p.grad.copy_(torch.randn_like(p))`: the same
    python written_over.py --write zeros   # `p.grad = torch.zeros_like(p)`: a clear,
                                           # zeroed_before_step's error alone
    python written_over.py --write half    # `p.grad = p.grad * 0.5`: made from it (no
                                           # finding)
    python written_over.py --write view    # `p.grad = p.grad.view(p.shape)`: itself (no
                                           # finding)
"""
import argparse

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--write", choices=["noise", "copy", "zeros", "half", "view"], default="half")
args = ap.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    opt.zero_grad()
    nn.functional.mse_loss(model(torch.randn(4, 8)), torch.randn(4, 1)).backward()
    for p in model.parameters():
        if args.write == "noise":
            p.grad = torch.randn_like(p)
        elif args.write == "copy":
            p.grad.copy_(torch.randn_like(p))
        elif args.write == "zeros":
            p.grad = torch.zeros_like(p)
        elif args.write == "half":
            p.grad = p.grad * 0.5
        else:
            p.grad = p.grad.view(p.shape)
    opt.step()
