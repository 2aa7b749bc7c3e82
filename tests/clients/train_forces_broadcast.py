"""A force field in plain torch whose checkpointed embedding's product is broadcast: the
embedding makes `c` (edges x W) and `s` (edges x 3 x W) and returns `(c.unsqueeze(1) *
s).sum(1)`, as torchmd-net's TensorEmbedding makes `CZij.unsqueeze(1) * stack([dp1, dp2,
dp3])`. Forces by `autograd.grad(energy, pos, create_graph=True)`, then the loss's backward
through the graph that pass built: under `checkpoint:emb` the force pass's re-run copy of
`c` is saved by the `mul` that pass ran, and that node's gradient for `c.unsqueeze(1)` is
summed over the 3 after its apply, with the copy still held (Note [A copy the force graph
holds, let go with its node], replay/engine.py).

    memledger compare tests/clients/train_forces_broadcast.py -p 'checkpoint:emb'
"""
import argparse
import torch
import torch.nn as nn
import torch.nn.functional as F

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--width", type=int, default=16)
args = p.parse_args()
torch.manual_seed(0)
W = args.width


class Emb(nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = nn.Linear(8, W)
        self.p = nn.ModuleList(nn.Linear(8, W) for _ in range(3))

    def forward(self, d, w):
        c = self.lin(d) * w                                    # (E, W), saved by the mul below
        s = torch.stack([p(d) for p in self.p], dim=1)         # (E, 3, W)
        return (c.unsqueeze(1) * s).sum(1)                     # broadcast over the 3


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.mu = nn.Parameter(torch.linspace(0, 3, 8))
        self.emb = Emb()
        self.head = nn.Linear(W, 1)

    def forward(self, pos):
        pos.requires_grad_(True)
        vec = pos[:, None, :] - pos[None, :, :]
        r = (vec.pow(2).sum(-1) + 1e-3).sqrt().reshape(-1)
        d = torch.exp(-(r[:, None] - self.mu) ** 2)
        w = torch.cos(r)[:, None]
        e = self.head(F.silu(self.emb(d, w))).sum()
        (dy,) = torch.autograd.grad([e], [pos], create_graph=True, retain_graph=True)
        return e, -dy


net = Net()
opt = torch.optim.SGD(net.parameters(), lr=1e-3)
for step in range(args.steps):
    pos = torch.rand(12, 3) * 3
    e, f = net(pos)
    loss = e.pow(2) + f.pow(2).mean()
    loss.backward()
    opt.step()
    opt.zero_grad()
