"""A training loop that checkpoints its own blocks, as many users' do.

    python tests/clients/train_checkpointed.py --steps 3
    memledger trace tests/clients/train_checkpointed.py --steps 2 -o ck.ledger -- --reentrant

Each block's forward goes through `torch.utils.checkpoint.checkpoint(block, x)` in the
model's forward (non-reentrant by default; `--reentrant` for the older kind, whose forward
runs without gradients). Dropout inside the blocks, so the recompute must restore the
generator state.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.checkpoint import checkpoint


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(width, 4 * width)
        self.fc2 = nn.Linear(4 * width, width)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(self.fc2(F.gelu(self.fc1(x))))


class Net(nn.Module):
    def __init__(self, width: int, depth: int, classes: int, reentrant: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, classes)
        self.reentrant = reentrant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.reentrant:   # its forward runs without gradients: the input must want them
            x = x.requires_grad_()
        for block in self.blocks:
            x = checkpoint(block, x, use_reentrant=self.reentrant)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--reentrant", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, args.depth, 10, args.reentrant)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x = torch.randn(args.batch_size, args.width, generator=gen)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen)
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
