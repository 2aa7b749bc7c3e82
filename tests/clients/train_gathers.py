"""Backward paths torch runs out of place while a dispatch mode is active (Note [In place
but for the mode] in memledger/trace/collector.py), all in one small model:

- a 3-D parameter read slice by slice (`W[i]`, as eager mixture-of-experts layers do): each
  slice's gradient is a full-size tensor, summed by autograd into one buffer;
- advanced indexing `h[idx]`, `gather`, `topk` and `index_select`, whose backward fills a
  zero tensor.

    python tests/clients/train_gathers.py --steps 3
    memledger trace tests/clients/train_gathers.py --steps 2
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, experts: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(experts, width, width) / width ** 0.5)
        self.proj = nn.Linear(width, width)

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        h = self.proj(x)
        y = sum(h @ self.w[i] for i in range(self.w.shape[0]))        # slices, summed
        y = y + h[idx].sum(0)                                          # indexing
        y = y + h.gather(1, idx[: h.shape[0], None].expand(-1, 4) % h.shape[1]).sum(1,
                                                                                  keepdim=True)
        y = y + h.topk(4, dim=1).values.mean(1, keepdim=True)          # topk
        y = y + h.index_select(0, idx[: h.shape[0]]).tanh()            # index_select
        return x + F.gelu(y)


class Net(nn.Module):
    def __init__(self, width: int, depth: int, experts: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(width, experts) for _ in range(depth))
        self.head = nn.Linear(width, 10)

    def forward(self, x: torch.Tensor, idx: torch.Tensor) -> torch.Tensor:
        for b in self.blocks:
            x = b(x, idx)
        return self.head(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch-size", type=int, default=128)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, 2, 4)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for _ in range(args.steps):
        x = torch.randn(args.batch_size, args.width)
        idx = torch.randint(0, args.batch_size, (args.batch_size,))
        loss = F.cross_entropy(model(x, idx), torch.randint(0, 10, (args.batch_size,)))
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
