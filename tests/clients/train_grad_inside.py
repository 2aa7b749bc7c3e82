"""A module whose forward takes a gradient of its own computation, as torch-struct's
marginals do (`torch.autograd.grad(logZ, potentials, create_graph=True)` inside the
forward: the marginals of a CRF are the gradient of its log-partition), and the loss is
read from that gradient, so the backward goes through a backward. Seeded, tiny.

    memledger predict ... -p 'checkpoint:marg'   (the region runs a backward inside)
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Marginals(nn.Module):
    """softmax(s) as the gradient of logsumexp(s @ W) in s, taken in the forward."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)

    def forward(self, s: torch.Tensor) -> torch.Tensor:
        z = torch.tanh(self.proj(s)).exp().sum(-1).log().sum()    # a log-partition
        (m,) = torch.autograd.grad(z, s, create_graph=True)       # its marginals (B, dim)
        return m


class Net(nn.Module):
    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.Sequential(*[Block(dim) for _ in range(depth)])
        self.marg = Marginals(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.marg(self.blocks(x))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--batch", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, 2)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.dim)
        loss = -(model(x) * torch.randn(args.batch, args.dim)).sum()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
