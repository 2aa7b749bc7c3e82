"""A force field in plain torch: an energy from atom positions through `blocks.*`, the forces
`-autograd.grad(energy, pos, create_graph=True)` (a backward pass that builds a graph), and
the loss's backward over energy and forces (a second pass, through that graph and the
energy's own). Each block's `gate` output is read by the force pass alone; the loss's
backward reads the copy the force graph saved.

    memledger trace tests/clients/train_forces.py --steps 1 -o f.ledger
    memledger predict f.ledger -p 'checkpoint:blocks.*'
"""

import argparse

import torch
import torch.nn as nn


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 2 * dim)

    def forward(self, x):
        a, b = self.fc(x).chunk(2, dim=-1)
        # a mask made in the block, saved by the `mul` alone: only a pass through that node
        # reads it
        return x + torch.tanh(a) * (b > 0).to(a.dtype)


class Field(nn.Module):
    def __init__(self, dim: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Linear(3, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, pos):
        x = torch.tanh(self.embed(pos))
        for block in self.blocks:
            x = block(x)
        return self.head(x).sum()


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--atoms", type=int, default=16)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--energy", type=float, default=0.0,
                   help="the energy term's weight (0: no term, the loss is the forces')")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Field(args.dim, args.depth)
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        pos = torch.randn(args.atoms, 3, requires_grad=True)
        energy = model(pos)
        forces = -torch.autograd.grad(energy, pos, create_graph=True)[0]
        loss = forces.pow(2).mean()
        if args.energy:
            loss = loss + args.energy * energy ** 2
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
