"""Post-LN blocks, `x = LayerNorm(x + fc2(gelu(fc1(x))))`, as BERT, RoBERTa and DistilBERT
end each layer: a block's output is made by its last op and saved by the next block.

    python tests/clients/train_postln.py --steps 3
    memledger predict run.ledger --policy 'selective:blocks.*:save=native_layer_norm'

With `native_layer_norm` in a selective save list, the selective-checkpoint cache holds each
block's output from forward until that block is re-run in backward, after the next block's
backward has let it go.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(width, 2 * width), nn.Linear(2 * width, width)
        self.ln = nn.LayerNorm(width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x + self.fc2(F.gelu(self.fc1(x))))


class Net(nn.Module):
    def __init__(self, width: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width) for _ in range(depth))
        self.head = nn.Linear(width, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--rows", type=int, default=1024)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--depth", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        loss = model(torch.randn(args.rows, args.width, generator=gen)).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
