"""A region handed an argument it ignores, whose own node saved a tensor no backward reads
(Note [An argument's dead node, held by the frame], memledger/replay/engine.py): the shape
of a Runge-Kutta step, `t_nodes = addcmul(t0, c[:, None], dt)` with `dt` trained, each
stage's time `t_nodes[i]` handed to a vector field `vf(t, y)` that reads only `y`.

    python tests/clients/train_dead_arg.py --steps 2
    memledger predict LEDGER --policy checkpoint:vf
"""

import argparse

import torch
from torch import nn

N, B, D = 100, 8, 16   # nodes (c: 100 float32 = 400 B), batch, width


class VectorField(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(D, 32), nn.Tanh(), nn.Linear(32, D))

    def forward(self, t, y):
        return self.net(y)   # t unread: its node is a dead branch


class Model(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.vf = VectorField()
        self.rate = nn.Parameter(torch.ones(B))
        self.register_buffer("h", torch.full((B,), 0.1))

    def forward(self, y):
        dt = self.rate * self.h                                 # (B,) needs grad
        c = torch.linspace(0.0, 1.0, N)                           # (N,) 400 B
        t_nodes = torch.addcmul(torch.zeros(N, B), c[:, None], dt)   # saves c for dt's grad
        for i in range(3):
            y = y + self.vf(t_nodes[i], y)
        return y


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Model()
    opt = torch.optim.SGD(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for _ in range(args.steps):
        y = torch.randn(B, D, generator=gen)
        loss = model(y).pow(2).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
