"""A head that follows running statistics of its targets, in plain torch: hl-gauss-pytorch's
`RunningStats` (tests/clients/train_hl_gauss.py --running-stats) cut down. It registers a
`step` counter and then a `running_mean`, and each training forward writes them in the
other order (`running_mean.copy_(...)`, then `step.add_(1)`) before scaling its output by
the mean, so a checkpoint's re-run would write both again. SGD, random data.

    memledger predict run.ledger -p 'checkpoint:head'    # refused: names running_mean
    memledger measure tests/clients/train_running_stats.py -p 'checkpoint:head'   # alike
"""

import argparse

import torch
from torch import nn


class Head(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 1)
        self.register_buffer("step", torch.tensor(1))
        self.register_buffer("running_mean", torch.tensor(0.0))

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        if self.training:
            with torch.no_grad():
                mean = self.running_mean + (y.mean() - self.running_mean) / self.step
                self.running_mean.copy_(mean)
                self.step.add_(1)
        return torch.tanh(self.fc(x)) * (1.0 + self.running_mean.abs())


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.trunk = nn.Sequential(nn.Linear(dim, dim), nn.SiLU())
        self.head = Head(dim)

    def forward(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        return self.head(self.trunk(x), y)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--dim", type=int, default=16)
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, args.dim), torch.randn(args.batch, 1)
        loss = nn.functional.mse_loss(model(x, y), y)
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
