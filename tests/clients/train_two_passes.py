"""A memory read by both of a step's backward passes, in plain torch: memformer's
`memory_replay_backprop` (tests/clients/train_memformer_mlm.py --mode mrbp), cut down.

The step's memory `m` is a leaf (as mrbp hands each segment its memory with
`requires_grad`), read by `read` (a Linear on both losses' paths), by `update` (a Linear
on the next memory's path only, or on both with `--both`) and by the product
`(update(m) + r) * m` outside both (which saves `m` too, so it stays on the device under
offload). The loop back-propagates the loss with `retain_graph=True`, then the next
memory with a gradient of ones, `retain_graph=True` too, as mrbp does for each segment,
and keeps both (and so the graph) to the next step's forward. SGD, random data.

    memledger compare tests/clients/train_two_passes.py --steps 1 \
        -p 'offload:read+offload:update'
"""

import argparse

import torch
from torch import nn


class MemoryNet(nn.Module):
    def __init__(self, dim: int, both: bool) -> None:
        super().__init__()
        self.read = nn.Linear(dim, dim)
        self.update = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 1)
        self.both = both

    def forward(self, m: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        r = self.read(m)
        u = self.update(m)
        h = torch.relu(r + u) if self.both else torch.relu(r)
        return self.head(h), (u + r) * m


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dim", type=int, default=32)
    p.add_argument("--both", action="store_true", help="`update` on the loss's path too")
    args = p.parse_args()
    torch.manual_seed(0)
    model = MemoryNet(args.dim, args.both)
    optimizer = torch.optim.SGD(model.parameters(), lr=1e-2)
    memory = torch.zeros(args.batch, args.dim)
    for _ in range(args.steps):
        y = torch.randn(args.batch, 1)
        m = (memory + torch.randn(args.batch, args.dim)).requires_grad_()
        pred, nxt = model(m)
        loss = (pred - y).pow(2).mean()
        optimizer.zero_grad()
        loss.backward(retain_graph=True)
        nxt.backward(torch.ones_like(nxt), retain_graph=True)
        optimizer.step()
        memory = nxt.detach()


if __name__ == "__main__":
    main()
