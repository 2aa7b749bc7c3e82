"""A checkpointed region whose saves are all its argument and its parameters: torch's
checkpoint re-runs it all the same at their first unpack, forking the CPU generator's
state (`torch.get_rng_state()`, 5,056 B) and stopping at once (the first op packs its
inputs before it runs). Note [A re-run that stops before its first op] (replay/engine.py).

    memledger predict/measure -p 'checkpoint:scale' ... -- --batch 2

A Linear, a GELU, a Linear, then `Scale` (`x * g + b`, res-mlp-pytorch's Affine: the
multiply saves `x` and `g`, the add nothing), a mean over the tokens and a head; SGD with
momentum, so that the second step's backward holds its peak where the re-run forks.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Scale(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.g = nn.Parameter(torch.ones(1, 1, dim))
        self.b = nn.Parameter(torch.zeros(1, 1, dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * self.g + self.b


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.fc2 = nn.Linear(4 * dim, dim)
        self.scale = Scale(dim)
        self.head = nn.Linear(dim, 10)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.scale(x + self.fc2(self.act(self.fc1(x))))   # (B, T, dim)
        return self.head(h.mean(dim=1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=2)
    p.add_argument("--tokens", type=int, default=4)
    p.add_argument("--dim", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim)
    optim = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.tokens, args.dim)
        loss = F.cross_entropy(model(x), torch.randint(0, 10, (args.batch,)))
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
