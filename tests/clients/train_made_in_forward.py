"""A model whose forward makes a module and calls it (Note [Modules the model makes in its
forward], memledger/trace/collector.py): it holds `act`, an `nn.Sequential(GELU, SiLU)`,
and makes another such Sequential in every forward (as litgpt's `GPT.forward` makes its
`nn.Identity()` head clamp). AdamW, random data, nothing downloaded.

    memledger predict run.ledger -p 'checkpoint:@Sequential'
"""

import argparse

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.inp = nn.Linear(16, width)
        self.act = nn.Sequential(nn.GELU(), nn.SiLU())
        self.mid = nn.Linear(width, width)
        self.out = nn.Linear(width, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.inp(x))
        h = nn.Sequential(nn.GELU(), nn.SiLU())(self.mid(h))   # made anew on every call
        return self.out(h)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=128)
    p.add_argument("--batch", type=int, default=256)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch, 16)
        loss = (model(x) - x).pow(2).mean()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
