"""A MAML-style loop: an inner step by torch.autograd.grad(create_graph=True) through
torch.func.functional_call, then the outer loss's backward and an Adam step.

    python tests/clients/train_maml.py 20
    memledger compare tests/clients/train_maml.py -p checkpoint:0 -p checkpoint:2 -- 20
"""
import sys
import torch
import torch.nn.functional as F
from torch.func import functional_call

torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(32, 64), torch.nn.Tanh(), torch.nn.Linear(64, 1))
opt = torch.optim.Adam(model.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
for step in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
    xs, ys = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
    xq, yq = torch.randn(16, 32, generator=g), torch.randn(16, 1, generator=g)
    params = dict(model.named_parameters())
    inner = F.mse_loss(functional_call(model, params, (xs,)), ys)
    grads = torch.autograd.grad(inner, list(params.values()), create_graph=True)
    fast = {k: p - 0.1 * gr for (k, p), gr in zip(params.items(), grads)}
    outer = F.mse_loss(functional_call(model, fast, (xq,)), yq)
    opt.zero_grad()
    outer.backward()
    opt.step()
    if step % 10 == 0:
        print(step, outer.item())
