"""A deep equilibrium layer in plain torch, as torchdeq trains one by implicit
differentiation: the fixed point z* = f(z*, x) found under no_grad, one call of f with grad
at it, and an autograd Function whose backward runs f once more (under `enable_grad`,
inside the backward) and solves the backward fixed point y = J^T y + g by `--iters`
`autograd.grad(f(h), h, y, retain_graph=True)` through that call. f's weights are computed
once per forward from `v` and `g` (weight normalisation, as torchdeq's `reset_norm` does),
so every call of f, the one in backward too, saves the second one's storage.

    memledger compare tests/clients/train_implicit_backward.py -p 'checkpoint:cell' -- --iters 4
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class Cell(nn.Module):
    def __init__(self, d: int) -> None:
        super().__init__()
        self.v1 = nn.Parameter(torch.randn(2 * d, d) / d)
        self.v2 = nn.Parameter(torch.randn(d, 2 * d) / d)
        self.g1 = nn.Parameter(torch.full((2 * d, 1), 0.5))
        self.g2 = nn.Parameter(torch.full((d, 1), 0.5))
        self.w1 = self.w2 = None

    def reset(self) -> None:
        # the re-parametrised weights, made once per forward and read by every call
        self.w1 = self.v1 * (self.g1 / self.v1.norm(dim=1, keepdim=True))
        self.w2 = self.v2 * (self.g2 / self.v2.norm(dim=1, keepdim=True))

    def forward(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        # the second linear's input needs a gradient (w1 does), so it saves w2 in every
        # call, the forward's (at z* detached) as well as the backward's
        return torch.tanh(F.linear(torch.relu(F.linear(z, self.w1)), self.w2) + u)


class ImplicitGrad(torch.autograd.Function):
    @staticmethod
    def forward(ctx, f, z, iters):
        ctx.f, ctx.iters = f, iters
        ctx.save_for_backward(z.detach())
        return z

    @staticmethod
    def backward(ctx, grad):
        z, = ctx.saved_tensors
        h = z.clone().requires_grad_()
        with torch.enable_grad():
            fz = ctx.f(h)
        y = torch.zeros_like(grad)
        for _ in range(ctx.iters):
            y = torch.autograd.grad(fz, h, y, retain_graph=True)[0] + grad
        return None, y, None


class DEQ(nn.Module):
    def __init__(self, d: int, iters: int) -> None:
        super().__init__()
        self.inj = nn.Linear(8, d)
        self.cell = Cell(d)
        self.head = nn.Linear(d, 4)
        self.iters = iters

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cell.reset()
        u = self.inj(x)

        def f(z):
            return self.cell(z, u)

        with torch.no_grad():
            z = torch.zeros_like(u)
            for _ in range(self.iters):
                z = f(z)
        z = ImplicitGrad.apply(f, f(z.detach()), self.iters)
        return self.head(z)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--iters", type=int, default=4)
    args = p.parse_args()
    torch.manual_seed(0)
    model = DEQ(args.dim, args.iters)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x, y = torch.randn(args.batch, 8), torch.randint(0, 4, (args.batch,))
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
