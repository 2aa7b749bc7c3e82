"""A weight-normed layer whose effective weight the loop logs after each step: plain torch,
the pin of Note [A parametrized weight read is no forward] (memledger/trace/steps.py), found
with pytorch-tcn (tests/clients/train_tcn.py), which CI may not install.

    python tests/clients/train_weight_read.py --steps 3
    memledger trace tests/clients/train_weight_read.py --steps 2 -o wr.ledger

`model[0]` is `weight_norm(nn.Linear(64, 64))`: reading `model[0].weight` calls its
`ParametrizationList` (a module with parameters) outside any forward, under gradients, so
`w` keeps that small graph until the next step's read replaces it.
"""

import argparse

import torch
import torch.nn as nn
from torch.nn.utils.parametrizations import weight_norm


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(weight_norm(nn.Linear(64, 64)), nn.ReLU(), nn.Linear(64, 8))
    optimizer = torch.optim.Adam(model.parameters())
    for step in range(args.steps):
        x = torch.randn(32, 64)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        w = model[0].weight   # the effective weight, logged
        print(f"step {step}  loss {loss.item():.4f}  |w| {w.norm().item():.4f}")


if __name__ == "__main__":
    main()
