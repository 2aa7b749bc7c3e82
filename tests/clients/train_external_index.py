"""A permutation kept as a parameter over numpy's memory (`nn.Parameter(torch.LongTensor(
np_perm))`, as FrEIA's `PermuteRandom` keeps it), between coupling-like blocks, with an
inverse pass in the loss. In plain torch.

    python tests/clients/train_external_index.py --steps 3 --cycle
    memledger compare tests/clients/train_external_index.py -p 'checkpoint:layers.1' -- --cycle

The permutation's forward `x[:, self.perm]` saves that index and nothing else; a
checkpoint's frame of the call (its RNG state and argument) lives until backward unpacks
it (Note [Model state over memory torch did not allocate], memledger/replay/prepared.py).
"""

import argparse

import numpy as np
import torch
from torch import nn


class Perm(nn.Module):
    def __init__(self, n: int, seed: int) -> None:
        super().__init__()
        p = np.random.default_rng(seed).permutation(n)
        self.perm = nn.Parameter(torch.LongTensor(p), requires_grad=False)   # numpy's memory
        self.perm_inv = nn.Parameter(torch.LongTensor(np.argsort(p)), requires_grad=False)

    def forward(self, x: torch.Tensor, rev: bool = False) -> torch.Tensor:
        return x[:, self.perm_inv if rev else self.perm]


class Coupling(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(n // 2, 4 * n), nn.Tanh(), nn.Linear(4 * n, n // 2))

    def forward(self, x: torch.Tensor, rev: bool = False) -> torch.Tensor:
        a, b = x.chunk(2, 1)
        t = self.net(a)
        return torch.cat([a, b - t if rev else b + t], 1)


class Flow(nn.Module):
    def __init__(self, n: int) -> None:
        super().__init__()
        self.layers = nn.ModuleList([Coupling(n), Perm(n, 0), Coupling(n), Perm(n, 1)])

    def forward(self, x: torch.Tensor, rev: bool = False) -> torch.Tensor:
        for layer in (reversed(self.layers) if rev else self.layers):
            x = layer(x, rev=rev)
        return x


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--cycle", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    flow = Flow(64)
    opt = torch.optim.Adam(flow.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(32, 64)
        z = flow(x)
        loss = z.pow(2).mean()
        if args.cycle:
            loss = loss + (flow(z.detach(), rev=True) - x).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
