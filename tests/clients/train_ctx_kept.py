"""A reversible block in plain torch, as h-transformer-1d's and reformer's
`ReversibleSequence` write theirs: a custom autograd Function whose forward runs the block
under no_grad and keeps its output on `ctx` as an attribute (not `save_for_backward`), and
whose backward re-runs the block with grad from that output to get the input's gradient.

    memledger predict ... -p 'checkpoint:rev'
"""

import argparse

import torch
import torch.nn as nn


class _Rev(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, f, g):
        x1, x2 = x.chunk(2, dim=-1)
        with torch.no_grad():
            y1 = x1 + f(x2)
            y2 = x2 + g(y1)
        y = torch.cat([y1, y2], dim=-1)
        # a detached alias, as the libraries keep it: returning `ctx.y` itself would make
        # the output hold its node, the node `ctx.y`, a cycle freed whenever Python's
        # garbage collector runs (its timing, not the run, would set the peak)
        ctx.y, ctx.f, ctx.g = y.detach(), f, g
        return y

    @staticmethod
    def backward(ctx, dy):
        y1, y2 = ctx.y.chunk(2, dim=-1)
        dy1, dy2 = dy.chunk(2, dim=-1)
        with torch.enable_grad():
            y1.requires_grad_()
            gy1 = ctx.g(y1)
            torch.autograd.backward(gy1, dy2)
        with torch.no_grad():
            x2 = y2 - gy1
            dx1 = dy1 + y1.grad
        with torch.enable_grad():
            x2.requires_grad_()
            fx2 = ctx.f(x2)
            torch.autograd.backward(fx2, dx1)
        return torch.cat([dx1, dy2 + x2.grad], dim=-1), None, None


class Reversible(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.f, self.g = nn.Linear(d, d), nn.Linear(d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _Rev.apply(torch.cat([x, x], dim=-1), self.f, self.g).chunk(2, dim=-1)[0]


class Net(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.inp, self.rev, self.out = nn.Linear(d, d), Reversible(d), nn.Linear(d, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(self.rev(self.inp(x)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(16)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        model(torch.randn(8, 16)).pow(2).mean().backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
