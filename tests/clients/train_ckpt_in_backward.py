"""A checkpoint whose first run is in backward, in plain torch: each block's forward runs
under no_grad inside a Function (a reversible layer's way), whose backward calls the block
again under enable_grad to re-make its graph and runs backward through it; the block
checkpoints a function of no module (`torch.utils.checkpoint`, reentrant) only when its
input requires grad, as memory-efficient-attention-pytorch's chunked attention does. So
every checkpoint first runs in backward, and keeps the CPU generator's state (5,056 B)
until its own backward.

`--keep-input` keeps each block's input on ctx as an attribute (as reversible layers keep
their output: backward frees none of it) instead of `save_for_backward`; `--scale S`
starts backward from `loss * S` (a loss weight, or accumulation's `loss / N`), so the
`loss` the loop keeps is no backward root.

    python tests/clients/train_ckpt_in_backward.py --steps 3
    memledger trace tests/clients/train_ckpt_in_backward.py --steps 2 -o cb.ledger
"""

import argparse

import torch
import torch.nn as nn
from torch.utils.checkpoint import checkpoint


def mix(h: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return torch.tanh(h @ w).exp()


class Block(nn.Module):
    def __init__(self, dim: int, chunks: int):
        super().__init__()
        self.w = nn.Parameter(torch.randn(dim, dim) / dim ** 0.5)
        self.chunks = chunks

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        fn = (lambda c: checkpoint(mix, c, self.w, use_reentrant=True)) \
            if x.requires_grad else (lambda c: mix(c, self.w))
        return torch.cat([fn(c) for c in x.chunk(self.chunks, dim=0)])


class Recompute(torch.autograd.Function):
    """y = block(x) run without a graph; backward calls the block again with one."""

    @staticmethod
    def forward(ctx, x, block, keep):
        ctx.block, ctx.keep = block, keep
        if keep:
            ctx.x = x.detach()
        else:
            ctx.save_for_backward(x)
        with torch.no_grad():
            return block(x)

    @staticmethod
    def backward(ctx, dy):
        (x,) = (ctx.x,) if ctx.keep else ctx.saved_tensors
        x = x.detach().requires_grad_()
        with torch.enable_grad():
            y = ctx.block(x)
            torch.autograd.backward(y, dy)
        return x.grad, None, None


class Net(nn.Module):
    def __init__(self, dim: int, depth: int, chunks: int, keep: bool):
        super().__init__()
        self.keep = keep
        self.inp = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList(Block(dim, chunks) for _ in range(depth))
        self.out = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = Recompute.apply(h, block, self.keep)
        return self.out(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--chunks", type=int, default=3)
    p.add_argument("--batch", type=int, default=12)
    p.add_argument("--keep-input", action="store_true")
    p.add_argument("--scale", type=float, default=1.0)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, args.depth, args.chunks, args.keep_input)
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        loss = model(torch.randn(args.batch, args.dim)).pow(2).mean()
        (loss * args.scale if args.scale != 1.0 else loss).backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
