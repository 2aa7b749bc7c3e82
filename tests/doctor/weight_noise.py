"""Weight-noise injection with gradient accumulation: each micro-batch adds noise to the
weights, runs forward and backward, and removes it; one step per 2 micro-batches.

    python weight_noise.py       # no finding: gradients at perturbed weights are the intended
                                 # estimate (the weights change between the 2 backward passes,
                                 # but nothing reads the gradient: once a mixed_gradient error)
"""
import torch
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(4):
    for micro in range(2):
        noise = [torch.randn_like(p) * 0.01 for p in model.parameters()]
        with torch.no_grad():
            for p, n in zip(model.parameters(), noise):
                p.add_(n)
        x, y = torch.randn(8, 8), torch.randint(0, 2, (8,))
        (nn.functional.cross_entropy(model(x), y) / 2).backward()
        with torch.no_grad():
            for p, n in zip(model.parameters(), noise):
                p.sub_(n)
    opt.step()
    opt.zero_grad()
