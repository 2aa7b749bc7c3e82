"""Modules `plan` searches beside the repeated blocks, in plain torch (Note [Modules that
are not blocks], memledger/replay/lone_modules.py), one `--case` each. SGD, random data.

- `stem`: a wide stem (`Stem`: narrow to wide, four tanh, wide to narrow; its four wide
  tensors saved) ahead of `blocks.{i}`, two narrow MLP blocks, and a Linear head, as
  charformer-pytorch's GBST tokenizer ahead of its encoder's layers: the stem saves most
  of the model's activations and is no block. The peak is the stem's backward, its four
  saves live, which no option on the blocks moves.
- `nolist`: the same stem, one MLP block (`body`) and the head, no module list at all.

    memledger plan tests/clients/train_plan_modules.py --budget 60% -- --case stem
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class Stem(nn.Module):
    """narrow -> wide, four tanh, wide -> narrow: each tanh saves its wide output (the last
    one saved by the second Linear too), so offloading the stem holds one of them at a time
    in its backward where the baseline holds four."""

    def __init__(self, narrow: int, wide: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(narrow, wide), nn.Linear(wide, narrow)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.fc1(x)          # (B, wide)
        for _ in range(4):
            h = torch.tanh(h)    # saved: (B, wide) fp32, 64 KiB at B 64, wide 256
        return self.fc2(h)


class StemNet(nn.Module):
    def __init__(self, narrow: int, wide: int, n: int) -> None:
        super().__init__()
        self.stem = Stem(narrow, wide)
        self.blocks = nn.ModuleList(Block(narrow) for _ in range(n))
        self.head = nn.Linear(narrow, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for block in self.blocks:
            x = block(x)
        return self.head(x)


class NoListNet(nn.Module):
    def __init__(self, narrow: int, wide: int) -> None:
        super().__init__()
        self.stem, self.body, self.head = Stem(narrow, wide), Block(narrow), nn.Linear(narrow, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.body(self.stem(x)))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("stem", "nolist"), default="stem")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--wide", type=int, default=256)
    ap.add_argument("--narrow", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=2)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = StemNet(args.narrow, args.wide, args.blocks) if args.case == "stem" \
        else NoListNet(args.narrow, args.wide)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.narrow), torch.randn(args.batch, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
