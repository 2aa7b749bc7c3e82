"""A loop that keeps every step's validation loss with its graph: after each optimizer
step it computes a loss on a held-out batch without `torch.no_grad()` and appends it to
`val_losses` (a list of graphs that grows by one each step). Plain torch, SGD, random data.

    memledger doctor tests/clients/train_val_losses.py   # cross_step_retention, an error
"""

import argparse

import torch
from torch import nn


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=6)
    ap.add_argument("--dim", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(args.dim, 32), nn.ReLU(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    xv, yv = torch.randn(8, args.dim), torch.randn(8, 1)
    val_losses = []
    for _ in range(args.steps):
        x, y = torch.randn(8, args.dim), torch.randn(8, 1)
        loss = (model(x) - y).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        val_loss = (model(xv) - yv).pow(2).mean()   # no torch.no_grad(): its graph stays
        val_losses.append(val_loss)


if __name__ == "__main__":
    main()
