"""WGAN-GP (Gulrajani et al.): the critic's loss carries a gradient penalty, the norm of the
critic's gradient at points between real and generated samples, taken with
`torch.autograd.grad(..., create_graph=True)` and trained through by the critic's own
backward. The critic is called first, so it is the model policies act on.

    python tests/clients/train_wgan_gp.py --steps 4
    memledger compare tests/clients/train_wgan_gp.py -p 'checkpoint:*' -- --steps 4
"""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
args = p.parse_args()
torch.manual_seed(0)
D = nn.Sequential(nn.Linear(32, 128), nn.LeakyReLU(0.2), nn.Linear(128, 128),
                  nn.LeakyReLU(0.2), nn.Linear(128, 1))
G = nn.Sequential(nn.Linear(16, 128), nn.ReLU(), nn.Linear(128, 32))
opt_d = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.5, 0.9))
opt_g = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.5, 0.9))
g = torch.Generator().manual_seed(1)
for step in range(args.steps):
    real = torch.randn(64, 32, generator=g)
    d_real = D(real).mean()
    with torch.no_grad():
        fake = G(torch.randn(64, 16, generator=g))
    d_fake = D(fake).mean()
    alpha = torch.rand(64, 1, generator=g)
    between = (alpha * real + (1 - alpha) * fake).requires_grad_()
    grad, = torch.autograd.grad(D(between).sum(), between, create_graph=True)
    penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    opt_d.zero_grad()
    (d_fake - d_real + 10 * penalty).backward()
    opt_d.step()
    g_loss = -D(G(torch.randn(64, 16, generator=g))).mean()
    opt_g.zero_grad()
    g_loss.backward()
    opt_g.step()
    print(step, round(penalty.item(), 4), round(g_loss.item(), 4))
