"""A loop that switches the model's mode between a micro-batch's forward and its backward,
in plain torch: pytorch-accelerated's `StepBasedEvaluationCallback` cut down. The forward
runs in train mode; an evaluation under `torch.no_grad()` (`model.eval()`) runs before
the backward and leaves the model in eval mode, so the backward, and a checkpoint's
re-run inside it, see `module.training == False`. `--backward-mode train` is the
opposite: forward in eval, `model.train()` before the backward. The blocks hold a
Dropout and a BatchNorm1d; `--block plain`: a LayerNorm, a Linear and a GELU, none of
which reads its flag (a re-run in eval mode computes what the forward did); `--block
noisy`: a Linear and a custom module adding noise in training, its flag read in a helper
method; `--block frozen`: a frozen encoder (a Linear and a Dropout) that the block's own
forward puts in eval mode and runs under `torch.no_grad()` (as discrete-key-value-
bottleneck-pytorch and transfusion-pytorch run theirs), then a Linear that trains.
`--backward-mode none`: forward and backward in train mode, no evaluation between. SGD,
random data.

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


class PlainBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(dim)
        self.fc = nn.Linear(dim, dim)
        self.act = nn.GELU()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.act(self.fc(self.norm(x)))


class Noise(nn.Module):
    """Gaussian noise in training, none in eval: its flag read in a helper method."""

    def _scale(self) -> float:
        return 0.1 if self.training else 0.0

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self._scale() * torch.randn_like(x)


class NoisyBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)
        self.noise = Noise()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.noise(self.fc(x)))


class FrozenEncoderBlock(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(dim, dim), nn.Dropout(0.1))
        self.encoder.requires_grad_(False)
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        self.encoder.eval()   # the block keeps its encoder frozen, whatever model.train() said
        with torch.no_grad():
            e = self.encoder(x)
        return x + torch.tanh(self.fc(x + e))


BLOCKS = {"bn": Block, "plain": PlainBlock, "noisy": NoisyBlock,
          "frozen": FrozenEncoderBlock}


class Net(nn.Module):
    def __init__(self, dim: int, depth: int, block: str = "bn") -> None:
        super().__init__()
        self.blocks = nn.ModuleList(BLOCKS[block](dim) for _ in range(depth))
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
    ap.add_argument("--backward-mode", choices=["eval", "train", "none"],
                    default="eval")
    ap.add_argument("--block", choices=sorted(BLOCKS), default="bn")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim, args.depth, args.block)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    forward_train = args.backward_mode != "train"
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)
        model.train(forward_train)
        loss = nn.functional.mse_loss(model(x), y)
        if args.backward_mode == "none":
            pass
        elif forward_train:   # an evaluation between the forward and the backward
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
