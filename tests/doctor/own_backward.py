"""An optimizer that runs backward itself, as pytorch-minimize's `torchmin.Minimizer` does:
the closure zeroes the gradients and returns the loss, with no backward ("the optimizer
will perform it"); step() calls it, runs `loss.backward(create_graph=True)` of its own,
takes a Hessian-vector product by a second backward through the gradient's graph, and
moves along the gradient.

    python own_backward.py     # no finding (once "ERROR zeroed_before_step ... cleared
                               # between backward and optimizer.step() in steps 2 and 3")
    python own_backward.py --no-hvp   # the evaluations alone
"""
import sys

import torch
from torch import nn

HVP = "--no-hvp" not in sys.argv
torch.manual_seed(0)


class OwnBackward(torch.optim.Optimizer):
    def __init__(self, params, lr=0.1, evals=2):
        super().__init__(params, dict(lr=lr, evals=evals))

    @torch.no_grad()
    def step(self, closure):
        params = self.param_groups[0]["params"]
        for _ in range(self.param_groups[0]["evals"]):
            with torch.enable_grad():
                loss = closure()
                loss.backward(create_graph=HVP)
            grads = [p.grad.detach().clone() for p in params]
            if HVP:   # the curvature along the gradient, as Newton-CG's products take it
                with torch.enable_grad():
                    flat = torch.cat([p.grad.reshape(-1) for p in params])
                    flat.backward(torch.cat([g.reshape(-1) for g in grads]))
            for p, g in zip(params, grads):
                p.sub_(g, alpha=self.param_groups[0]["lr"])
        return loss.detach()

model = nn.Sequential(nn.Linear(4, 8), nn.Tanh(), nn.Linear(8, 1))
opt = OwnBackward(model.parameters())
x = torch.randn(16, 4)
y = x.sum(-1, keepdim=True).sin()


def closure():
    opt.zero_grad()
    return nn.functional.mse_loss(model(x), y)   # no backward: step() runs it


for step in range(4):
    opt.step(closure)
