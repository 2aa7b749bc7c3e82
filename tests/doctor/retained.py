"""A graph kept by `backward(retain_graph=True)` with no second backward (check
`cross_step_retention`).

    python retained.py            # loss.backward(retain_graph=True): the graph's saved
                                  # tensors stay until the next step binds `loss` again
    python retained.py --fixed    # loss.backward()
    python retained.py --twice    # a second loss on the same graph: the retained part is
                                  # used, and the second backward frees it
    python retained.py --heads    # a trunk and three heads, retain_graph=True on every
                                  # head's backward, the last one's too
    python retained.py --gan      # a GAN: d_loss reads G's output undetached and retains,
                                  # D steps, then g_loss backpropagates the same G graph:
                                  # what the retain is for, no finding
    python retained.py --gan --regenerate   # ... g_loss on a new G forward: the retained
                                  # graph is never used again
    python retained.py --extra    # the plain form through a trainable layer no
                                  # optimizer holds: still named (nothing to wait for)
    python retained.py --sum      # two micro-batches, each retained and summed into
                                  # `total`: `loss` and `total` keep both graphs
"""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--fixed", action="store_true")
p.add_argument("--twice", action="store_true")
p.add_argument("--heads", action="store_true")
p.add_argument("--gan", action="store_true")
p.add_argument("--regenerate", action="store_true")
p.add_argument("--sum", action="store_true")
p.add_argument("--extra", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(256, 1024), nn.ReLU(), nn.Linear(1024, 10))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
extra = nn.Linear(10, 10)   # --extra: trainable, in no optimizer
heads = nn.ModuleList([nn.Linear(1024, 4) for _ in range(3)])
if ARGS.heads:
    trunk = model[:2]
    opt = torch.optim.SGD([*trunk.parameters(), *heads.parameters()], lr=0.1)
if ARGS.gan:   # Note [A retained graph another optimizer's backward used]
    G = nn.Sequential(nn.Linear(8, 64), nn.ReLU(), nn.Linear(64, 16))
    D = nn.Sequential(nn.Linear(16, 64), nn.ReLU(), nn.Linear(64, 1))
    og, od = torch.optim.Adam(G.parameters(), 1e-3), torch.optim.Adam(D.parameters(), 1e-3)
    bce = nn.BCEWithLogitsLoss()
    for step in range(ARGS.steps):
        real, fake = torch.randn(32, 16), G(torch.randn(32, 8))
        od.zero_grad()
        d_loss = bce(D(real), torch.ones(32, 1)) + bce(D(fake), torch.zeros(32, 1))
        d_loss.backward(retain_graph=True)
        od.step()
        og.zero_grad()
        if ARGS.regenerate:
            fake = G(torch.randn(32, 8))
        g_loss = bce(D(fake), torch.ones(32, 1))
        g_loss.backward()
        og.step()
    raise SystemExit(0)
for step in range(0 if ARGS.sum else ARGS.steps):
    x = torch.randn(64, 256)
    if ARGS.heads:
        opt.zero_grad()
        feat = trunk(x)
        for head in heads:
            loss = head(feat).pow(2).mean()
            loss.backward(retain_graph=True)
        opt.step()
        continue
    out = model(x)
    if ARGS.extra:
        out = extra(out)
    loss = out.pow(2).mean()
    opt.zero_grad()
    if ARGS.fixed:
        loss.backward()
    elif ARGS.twice:
        loss.backward(retain_graph=True)
        out.abs().mean().backward()
    else:
        loss.backward(retain_graph=True)
    opt.step()
for step in range(ARGS.steps if ARGS.sum else 0):   # Note [Other variables that hold a
    total = 0.                                     # retained graph]
    for _ in range(2):
        loss = model(torch.randn(64, 256)).pow(2).mean()
        loss.backward(retain_graph=True)
        total += loss
    opt.step()
    opt.zero_grad()
