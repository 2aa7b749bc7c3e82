"""WGAN-GP whose gradient penalty trains nothing: `torch.autograd.grad` without
`create_graph=True` returns gradients with no history, so the penalty built from them is a
constant added to the critic's loss (check 9, dead_penalty).

    python gradient_penalty.py --bug          # the penalty's gradients taken without a graph
    python gradient_penalty.py --fixed        # create_graph=True (styles.py --loop gp too)
    python gradient_penalty.py --first-order  # first-order MAML: fast weights from gradients
                                              # taken without a graph, on purpose (the
                                              # gradient is not a term added to a loss)
    python gradient_penalty.py --log-norm     # the critic's input-gradient norm, taken
                                              # without a graph for logging only
    python gradient_penalty.py --fixed --smooth   # the penalty smoothed by an EMA of an
                                              # evaluation's penalty, whose gradients are
                                              # taken without a graph, kept `.detach()`ed
                                              # (as torchmd-net's LNNP smooths its losses)
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call

BUG = "--bug" in sys.argv
torch.manual_seed(0)
if "--first-order" in sys.argv:
    model = nn.Sequential(nn.Linear(1, 32), nn.ReLU(), nn.Linear(32, 1))
    meta = torch.optim.Adam(model.parameters(), lr=1e-3)
    for it in range(4):
        a, xs, xq = torch.rand(1) * 4, torch.rand(10, 1) * 10 - 5, torch.rand(10, 1) * 10 - 5
        fast = dict(model.named_parameters())
        inner = F.mse_loss(functional_call(model, fast, (xs,)), a * torch.sin(xs))
        grads = torch.autograd.grad(inner, list(fast.values()))   # first order: no graph
        fast = {k: v - 0.01 * g for (k, v), g in zip(fast.items(), grads)}
        outer = F.mse_loss(functional_call(model, fast, (xq,)), a * torch.sin(xq))
        meta.zero_grad()
        outer.backward()
        meta.step()
        del fast, inner, grads
    sys.exit(0)
G = nn.Sequential(nn.Linear(4, 16), nn.ReLU(), nn.Linear(16, 8))
D = nn.Sequential(nn.Linear(8, 16), nn.LeakyReLU(0.2), nn.Linear(16, 1))
og = torch.optim.Adam(G.parameters(), lr=1e-4, betas=(0.0, 0.9))
od = torch.optim.Adam(D.parameters(), lr=1e-4, betas=(0.0, 0.9))
ema_p = None
for it in range(4):
    real = torch.randn(8, 8)
    fake = G(torch.randn(8, 4)).detach()
    eps = torch.rand(8, 1)
    mixed = (eps * real + (1 - eps) * fake).requires_grad_(True)
    if BUG:
        grad, = torch.autograd.grad(D(mixed).sum(), mixed)
    else:
        grad, = torch.autograd.grad(D(mixed).sum(), mixed, create_graph=True)
    penalty = ((grad.norm(2, dim=1) - 1) ** 2).mean()
    if ema_p is not None:   # --smooth: a constant on purpose, detached below
        penalty = 0.5 * penalty + 0.5 * ema_p
    loss_d = D(fake).mean() - D(real).mean() + 10 * penalty
    if "--log-norm" in sys.argv:   # logged, never added to a loss
        seen, = torch.autograd.grad(D(real.requires_grad_(True)).sum(), real)
        print(f"critic input-gradient norm {seen.norm():.3f}")
        real.requires_grad_(False)
    od.zero_grad()
    loss_d.backward()
    od.step()
    loss_g = -D(G(torch.randn(8, 4))).mean()
    og.zero_grad()
    loss_g.backward()
    og.step()
    if "--smooth" in sys.argv:   # an evaluation: gradients read, no graph wanted
        grad, = torch.autograd.grad(D(mixed).sum(), mixed)
        ema_p = ((grad.norm(2, dim=1) - 1) ** 2).mean().detach()
