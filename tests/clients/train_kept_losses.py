"""Micro-batches whose losses the script sums graphs and all, as recurrent-memory-transformer's
train.py sums what its wrapper returns: each micro-batch's `loss.backward(retain_graph=True)`,
then `total += loss`, so every micro-batch's graph lives to the step's end; each batch `x`
stays in its variable until the next one replaces it. Two residual blocks, SGD.

    memledger compare tests/clients/train_kept_losses.py -p 'offload:*' --steps 2

`--free-graph`: `total += loss.item()` and no retain_graph, the usual accumulation loop.
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.tanh(self.fc1(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--micro", type=int, default=3)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--batch", type=int, default=40)
    p.add_argument("--free-graph", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    net = nn.Sequential(Block(args.width), Block(args.width))
    opt = torch.optim.SGD(net.parameters(), lr=0.01)
    for step in range(args.steps):
        total = 0.
        for _ in range(args.micro):
            x = torch.randn(args.batch, args.width)
            loss = net(x).pow(2).mean() / args.micro
            loss.backward(retain_graph=not args.free_graph)
            total += loss.item() if args.free_graph else loss
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {float(total):.4f}")


if __name__ == "__main__":
    main()
