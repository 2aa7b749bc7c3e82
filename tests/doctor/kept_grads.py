"""Per-loss gradients kept by the script and folded back before the step (Note [A gradient
folded into the step's], memledger/trace/doctor_folded.py): two losses a step, each on a
batch of its own, each one's backward after a `zero_grad()`.

    python kept_grads.py --fold sum      # `p.grad = g_a + g_b` from the kept tensors
    python kept_grads.py --fold add      # `p.grad.add_(kept)`: into the second's gradient
    python kept_grads.py --fold clone    # kept as copies, the gradients zeroed in place
    python kept_grads.py --fold foreach  # `torch._foreach_add_(grads, kept)`
    python kept_grads.py --bug log       # the first loss's gradients only logged: dropped
    python kept_grads.py --bug zero      # kept as references, then zeroed in place and
                                         # refilled by the second backward: dropped

The correct forms use every backward pass (no finding; `--fold sum` once drew
"dropped_update: 3 of 6 backward passes made gradients that no optimizer.step() used");
the two bugs drop the first loss's pass each step (3 of 6).
"""
import argparse

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--fold", choices=["sum", "add", "clone", "foreach"], default="sum")
ap.add_argument("--bug", choices=["log", "zero"])
args = ap.parse_args()
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.Tanh(), nn.Linear(16, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
params = list(model.parameters())
to_none = args.fold != "clone" and args.bug != "zero"


def loss_of() -> torch.Tensor:
    x, y = torch.randn(4, 8), torch.randn(4, 1)
    return nn.functional.mse_loss(model(x), y)


for step in range(3):
    opt.zero_grad(set_to_none=to_none)
    loss_of().backward()
    if args.bug == "log":
        norm = sum(p.grad.norm() for p in params)   # read, folded into nothing
    elif args.bug == "zero" or args.fold in ("sum", "add", "foreach"):
        kept = [p.grad for p in params]            # the tensors themselves
    else:
        kept = [p.grad.detach().clone() for p in params]
    opt.zero_grad(set_to_none=to_none)
    loss_of().backward()
    if args.bug == "log":
        pass
    elif args.fold == "sum" or args.bug == "zero":
        for p, k in zip(params, kept):
            p.grad = k + p.grad
    elif args.fold == "foreach":
        torch._foreach_add_([p.grad for p in params], kept)
    else:
        for p, k in zip(params, kept):
            p.grad.add_(k)
    opt.step()
