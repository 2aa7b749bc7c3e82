"""Modules chosen by the data: a top-1 mixture of experts (an expert no token is routed to
does not run in that step) and an auxiliary head used every other step.

    python moe.py                # no finding (unrouted experts once read as unused_parameter)
    python moe.py --aux          # and an auxiliary loss every other step: no finding
    python moe.py --bug          # the MoE's output norm built but never called: every step,
                                 # no gradient (unused_parameter)
"""
import sys

import torch
from torch import nn

AUX = "--aux" in sys.argv
BUG = "--bug" in sys.argv
torch.manual_seed(0)


class MoE(nn.Module):
    def __init__(self, d=16, n=8):
        super().__init__()
        self.gate = nn.Linear(d, n)
        self.experts = nn.ModuleList(nn.Sequential(nn.Linear(d, d), nn.GELU()) for _ in range(n))
        self.norm = nn.LayerNorm(d)

    def forward(self, x):
        w = self.gate(x).softmax(-1)
        top = w.argmax(-1)
        out = torch.zeros_like(x)
        for e, expert in enumerate(self.experts):
            m = top == e
            if m.any():
                out[m] = expert(x[m]) * w[m, e:e + 1]
        return x + out if BUG else self.norm(x + out)


body = nn.Sequential(nn.Linear(8, 16), MoE())
head, aux = nn.Linear(16, 2), nn.Linear(16, 8)
params = [*body.parameters(), *head.parameters(), *(aux.parameters() if AUX else ())]
opt = torch.optim.AdamW(params, lr=1e-3)
for step in range(4):
    x, y = torch.randn(6, 8), torch.randint(0, 2, (6,))
    h = body(x)
    loss = nn.functional.cross_entropy(head(h), y)
    if AUX and step % 2 == 0:
        loss = loss + nn.functional.mse_loss(aux(h), x)
    opt.zero_grad()
    loss.backward()
    opt.step()
