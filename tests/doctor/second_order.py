"""A second-order optimizer in plain torch: damped Gauss-Newton (Levenberg), which builds the residuals'
Jacobian inside step() (`torch.func.jacrev` over `functional_call`) and moves the
parameters by the damped normal equations' solution, with no backward and no `.grad` (as pypose's
`pp.optim.LM` / `GN` do; Note [A step that finds its own direction], doctor/updates.py).

    --bug adam    the same loop with Adam, which moves nothing without a gradient
"""
import sys

import torch
from torch import nn
from torch.func import functional_call, jacrev

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""


class GaussNewton(torch.optim.Optimizer):
    def __init__(self, model: nn.Module) -> None:
        super().__init__(model.parameters(), defaults={})
        self.model = model

    @torch.no_grad()
    def step(self, x, y):
        names = [n for n, _ in self.model.named_parameters()]
        params = [p for _, p in self.model.named_parameters()]

        def residual(*values):
            return (functional_call(self.model, dict(zip(names, values)), (x,)) - y).flatten()

        with torch.enable_grad():
            jac = jacrev(residual, argnums=tuple(range(len(params))))(*params)
        J = torch.cat([j.reshape(j.shape[0], -1) for j in jac], 1)   # (residuals, numel)
        r = residual(*params)
        A = J.T @ J + torch.eye(J.shape[1])   # Levenberg's damping 1
        d = torch.linalg.solve(A, -J.T @ r)
        for p, dp in zip(params, d.split([p.numel() for p in params])):
            p.add_(dp.view_as(p))
        return r.square().sum()


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(2, 4), nn.Tanh(), nn.Linear(4, 1))
opt = torch.optim.Adam(model.parameters(), lr=0.1) if BUG == "adam" else GaussNewton(model)
x = torch.randn(16, 2)
y = x[:, :1] * 0.5 - x[:, 1:] * 0.25
for _ in range(5):
    if BUG == "adam":
        loss = (model(x) - y).square().sum()
        opt.step()
    else:
        loss = opt.step(x, y)
    print(f"loss {loss.item():.4f}")
