"""Two backward passes per step, as people write them (helper scripts for the policy tests).

    python tests/clients/train_backward_twice.py --mode retain     # two heads, retain_graph
    python tests/clients/train_backward_twice.py --mode inplace    # Linear + ReLU(inplace)

- `retain`: two losses on two heads; the first backward keeps the graph
  (`retain_graph=True`) for the second, so every block's saved tensors are read twice.
  torch's checkpoint re-runs a region for each pass; its selective checkpoint refuses the
  second ("Trying to backward an extra time").
- `inplace`: one backward; a block ends in `ReLU(inplace=True)` after a Linear, so the
  Linear's output (which selective checkpointing keeps by default) is changed in place.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Net(nn.Module):
    def __init__(self, inplace: bool) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(
            nn.Sequential(nn.Linear(32, 64), nn.ReLU(inplace=True) if inplace else nn.GELU(),
                          nn.Linear(64, 32)) for _ in range(2))
        self.h1, self.h2 = nn.Linear(32, 4), nn.Linear(32, 1)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        for b in self.blocks:
            x = x + b(x)
        return self.h1(x), self.h2(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=["retain", "inplace"], required=True)
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(inplace=args.mode == "inplace")
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        o1, o2 = model(torch.randn(16, 32))
        opt.zero_grad()
        F.cross_entropy(o1, torch.randint(0, 4, (16,))).backward(
            retain_graph=args.mode == "retain")
        if args.mode == "retain":
            o2.pow(2).mean().backward()
        opt.step()


if __name__ == "__main__":
    main()
