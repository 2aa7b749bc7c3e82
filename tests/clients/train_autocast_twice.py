"""MLP blocks (`x + b(gelu(a(x)))`) under CPU bf16 autocast, the model called twice in one
autocast region (a batch and its reverse, two loss terms), as a consistency or
permutation-invariance loss does.

    python tests/clients/train_autocast_twice.py --steps 2

The second call takes each Linear's bf16 weight cast from autocast's cache and saves it:
the cast the first call made is saved last by the second call. A checkpointed block's
re-run still stops at its own last pack (`b`'s, before `b`'s kernel and its oneDNN
scratch): Note [A later call's save of a cached cast ends no re-run] (replay/engine.py).
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.a, self.b = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.b(F.gelu(self.a(x)))


class Net(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--once", action="store_true", help="call the model once per step")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.width)
        with torch.autocast("cpu", dtype=torch.bfloat16):
            loss = model(x).float().pow(2).mean()
            if not args.once:
                loss = loss + model(x.flip(0)).float().pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
