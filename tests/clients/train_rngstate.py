"""A block that keeps the CPU generator's state as a plain attribute, in plain torch: each
forward records `torch.get_rng_state()` on the block (`self.cpu_state`, a fresh 5,056 B
tensor each call) before its dropout, as linear-attention-transformer's reversible blocks do
on their `Deterministic` (tests/clients/train_linattn.py --mode rev). A checkpoint's re-run
records it again and the old state goes there (Note [A replaced state, judged by its
digest], memledger/measure/apply.py). A residual MLP of `--depth` such blocks, Adam,
random data.

    memledger compare tests/clients/train_rngstate.py --steps 2 -p 'selective:blocks.0'
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int, hidden: int, dropout: float) -> None:
        super().__init__()
        self.up = nn.Linear(dim, hidden)
        self.down = nn.Linear(hidden, dim)
        self.drop = nn.Dropout(dropout)
        self.cpu_state = None

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.cpu_state = torch.get_rng_state()
        return x + self.down(self.drop(torch.relu(self.up(x))))


class Net(nn.Module):
    def __init__(self, dim: int, hidden: int, depth: int, dropout: float) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim, hidden, dropout) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--hidden", type=int, default=64)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--dropout", type=float, default=0.1)
    args = ap.parse_args()

    torch.manual_seed(0)
    model = Net(args.dim, args.hidden, args.depth, args.dropout)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)
        loss = nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
