"""A shared module the model calls itself as well as from its blocks, in plain torch: one
`nn.Linear` registered as each block's `proj` and as the model's own `proj`, called by each
block and once more by the model's forward on the blocks' output (as
feedback-transformer-pytorch's `shared_kv_proj`). Seeded, tiny.

    memledger trace tests/clients/train_shared_proj.py --steps 1 -o s.ledger
    memledger show s.ledger
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, proj: nn.Linear, dim: int):
        super().__init__()
        self.proj = proj                       # the model's one Linear, under a second path
        self.norm = nn.LayerNorm(dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.proj(self.norm(x)).tanh()


class Model(nn.Module):
    def __init__(self, dim: int, depth: int):
        super().__init__()
        proj = nn.Linear(dim, dim)
        self.blocks = nn.ModuleList([Block(proj, dim) for _ in range(depth)])
        self.proj = proj

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.proj(2 * x)                # the model's own call of the shared Linear


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--batch", type=int, default=4)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model(args.dim, 2)
    optim = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        model(torch.randn(args.batch, args.dim)).square().mean().backward()
        optim.step()
        optim.zero_grad()


if __name__ == "__main__":
    main()
