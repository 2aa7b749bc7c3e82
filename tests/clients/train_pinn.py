"""A physics-informed network (PINN) for the 1-D heat equation u_t = k u_xx: the loss is the
PDE's residual at random collocation points, its derivatives taken by
`torch.autograd.grad(..., create_graph=True)` (u_x, then u_xx from u_x: third-order
graphs through the network), plus boundary and initial terms; Adam, then the residual's
backward. As PINN codes (DeepXDE's PyTorch backend, the original PINN papers) train.

    python tests/clients/train_pinn.py --steps 4
    memledger compare tests/clients/train_pinn.py -p 'checkpoint:blocks.*' -- --steps 4

`predict` refuses policies on the blocks (NotPredicted; `compare` measures them): each
graph-building backward pass reads the blocks' saves again, and what it reads back (a
re-made tensor, an offload copy) is saved again by the graph it builds; the replay prices
one read-back per save (docs/accuracy.md, "Second-order loops and parameters handed in").
"""
import argparse

import torch
from torch import nn


class PINN(nn.Module):
    def __init__(self, width: int = 64, depth: int = 3) -> None:
        super().__init__()
        self.inp = nn.Linear(2, width)
        self.blocks = nn.ModuleList(nn.Sequential(nn.Linear(width, width), nn.Tanh())
                                    for _ in range(depth))
        self.out = nn.Linear(width, 1)

    def forward(self, x, t):
        h = torch.tanh(self.inp(torch.cat([x, t], dim=1)))
        for b in self.blocks:
            h = b(h)
        return self.out(h)


p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
p.add_argument("--points", type=int, default=256)
args = p.parse_args()
torch.manual_seed(0)
net = PINN()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
k = 0.1
for step in range(args.steps):
    x = torch.rand(args.points, 1, generator=g).requires_grad_()
    t = torch.rand(args.points, 1, generator=g).requires_grad_()
    u = net(x, t)
    u_x, u_t = torch.autograd.grad(u.sum(), (x, t), create_graph=True)
    u_xx, = torch.autograd.grad(u_x.sum(), x, create_graph=True)
    residual = (u_t - k * u_xx).pow(2).mean()
    xb = torch.randint(0, 2, (32, 1), generator=g).float()
    boundary = net(xb, torch.rand(32, 1, generator=g)).pow(2).mean()
    x0 = torch.rand(32, 1, generator=g)
    initial = (net(x0, torch.zeros(32, 1)) - torch.sin(torch.pi * x0)).pow(2).mean()
    loss = residual + boundary + initial
    opt.zero_grad()
    loss.backward()
    opt.step()
    print(step, round(loss.item(), 5))
