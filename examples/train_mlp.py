"""A small MLP classifier trained with Adam on synthetic data.

    python examples/train_mlp.py --steps 20
    memledger trace examples/train_mlp.py --steps 3 -o mlp.ledger
    memledger show mlp.ledger
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F


class MLP(nn.Module):
    def __init__(self, d_in: int = 256, d_hidden: int = 512, n_classes: int = 10) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d_in, d_hidden)
        self.act = nn.ReLU()
        self.fc2 = nn.Linear(d_hidden, d_hidden)
        self.head = nn.Linear(d_hidden, n_classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.act(self.fc1(x))       # (B, H)
        x = self.act(self.fc2(x))       # (B, H)
        return self.head(x)             # (B, n_classes)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=20)
    p.add_argument("--batch-size", type=int, default=64)
    p.add_argument("--device", default="cpu", help="cpu, cuda, cuda:1, ...")
    args = p.parse_args()

    torch.manual_seed(0)
    model = MLP().to(args.device)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1234)          # the data has its own seed
    for step in range(args.steps):
        x = torch.randn(args.batch_size, 256, generator=gen).to(args.device)
        y = torch.randint(0, 10, (args.batch_size,), generator=gen).to(args.device)
        logits = model(x)
        loss = F.cross_entropy(logits, y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if step % 10 == 0:
            print(f"step {step:4d}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
