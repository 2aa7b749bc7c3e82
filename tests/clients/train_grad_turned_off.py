"""A block whose forward turns off a parameter's requires_grad after using it, as
compressive-transformer-pytorch's `SelfAttention` calls `self.to_kv.weight.detach_()`
(Note [A parameter's requires_grad, as the first run had it], measure/apply.py): the
weight trains in the first step and never after. Plain torch, seeded, tiny.

    memledger measure tests/clients/train_grad_turned_off.py -p 'checkpoint:blocks.*'
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, dim)
        self.out = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = self.proj(x).tanh()
        self.proj.weight.detach_()   # trained until now, frozen from here on
        return x + self.out(y)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential()
    model.add_module("blocks", nn.Sequential(*[Block(args.dim) for _ in range(args.depth)]))
    model.add_module("head", nn.Linear(args.dim, 1))
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        loss = model(torch.randn(16, args.dim)).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
