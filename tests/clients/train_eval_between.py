"""A loop that switches the model's mode between a micro-batch's forward and its backward,
in plain torch: pytorch-accelerated's `StepBasedEvaluationCallback` cut down. The forward
runs in train mode; an evaluation under `torch.no_grad()` (`model.eval()`) runs before
the backward and leaves the model in eval mode, so the backward, and a checkpoint's
re-run inside it, see `module.training == False`. `--backward-mode train` is the
opposite: forward in eval, `model.train()` before the backward. The blocks hold a
Dropout and a BatchNorm1d. SGD, random data.

    memledger predict run.ledger -p 'checkpoint:blocks.*'      # refused: another mode
    memledger measure tests/clients/train_eval_between.py -p 'checkpoint:blocks.*'   # alike
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.norm = nn.BatchNorm1d(dim)
        self.drop = nn.Dropout(0.1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.drop(torch.relu(self.norm(self.fc(x))))


class Net(nn.Module):
    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--depth", type=int, default=2)
    ap.add_argument("--backward-mode", choices=["eval", "train"], default="eval")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    forward_train = args.backward_mode == "eval"
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)
        model.train(forward_train)
        loss = nn.functional.mse_loss(model(x), y)
        if forward_train:     # an evaluation between the forward and the backward
            model.eval()
            with torch.no_grad():
                model(torch.randn(args.batch, args.dim))
        else:
            model.train()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
