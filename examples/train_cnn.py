"""A small CNN (conv, batch-norm, pooling) trained with SGD + momentum on synthetic images.

    python examples/train_cnn.py --steps 20
    memledger trace examples/train_cnn.py --steps 3 -o cnn.ledger
    memledger show cnn.ledger
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class ConvBlock(nn.Module):
    def __init__(self, c_in: int, c_out: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c_in, c_out, kernel_size=3, padding=1, bias=False)
        self.bn = nn.BatchNorm2d(c_out)
        self.pool = nn.MaxPool2d(2)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.pool(F.relu(self.bn(self.conv(x))))   # (B, c_out, H/2, W/2)


class CNN(nn.Module):
    def __init__(self, n_classes: int = 10) -> None:
        super().__init__()
        self.blocks = nn.Sequential(ConvBlock(3, 16), ConvBlock(16, 32), ConvBlock(32, 64))
        self.head = nn.Linear(64 * 4 * 4, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.blocks(x)                                  # (B, 64, 4, 4)
        return self.head(x.flatten(1))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    args = p.parse_args()

    torch.manual_seed(0)
    model = CNN().to(args.device)
    opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(1234)
    model.train()
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 3, 32, 32, generator=gen).to(args.device)  # (B, 3, 32, 32)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen).to(args.device)
        loss = F.cross_entropy(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
