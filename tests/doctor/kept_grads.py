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
    python kept_grads.py --fold scaled   # `p.grad = p.grad + k * (|g| / |k|)`: the kept
                                         # gradient rescaled by norms, then summed
    python kept_grads.py --fold reset    # `g = p.grad; p.grad = torch.zeros_like(p)`, then
                                         # both added into it
    python kept_grads.py --bug replace   # `p.grad = k.clone()`: the second loss's gradient
                                         # overwritten by the first's: the second dropped
    python kept_grads.py --bug reset     # `p.grad = torch.zeros_like(p)`, then the kept
                                         # added: the second dropped
    python kept_grads.py --bug scale     # `p.grad.mul_(k.norm())`: the first loss's norm
                                         # scales the second's gradient: the first dropped

The correct forms use every backward pass (no finding; `--fold sum` once drew
"dropped_update: 3 of 6 backward passes made gradients that no optimizer.step() used");
each bug drops one loss's pass each step (3 of 6; `replace`, `reset` and `scale` once drew
no finding: Note [A gradient written over] in memledger/trace/doctor_folded.py).
"""
import argparse

import torch
from torch import nn

ap = argparse.ArgumentParser()
ap.add_argument("--fold", choices=["sum", "add", "clone", "foreach", "scaled", "reset"],
                default="sum")
ap.add_argument("--bug", choices=["log", "zero", "replace", "reset", "scale"])
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
    elif args.bug is not None or args.fold != "clone":
        kept = [p.grad for p in params]            # the tensors themselves
    else:
        kept = [p.grad.detach().clone() for p in params]
    opt.zero_grad(set_to_none=to_none)
    loss_of().backward()
    if args.bug == "log":
        pass
    elif args.fold == "sum" and args.bug is None or args.bug == "zero":
        for p, k in zip(params, kept):
            p.grad = k + p.grad
    elif args.bug == "replace":
        for p, k in zip(params, kept):
            p.grad = k.clone()
    elif args.bug == "reset":
        for p, k in zip(params, kept):
            p.grad = torch.zeros_like(p)
            p.grad.add_(k)
    elif args.bug == "scale":
        for p, k in zip(params, kept):
            p.grad.mul_(k.norm())
    elif args.fold == "scaled":
        for p, k in zip(params, kept):
            p.grad = p.grad + k * (p.grad.norm() / k.norm())
    elif args.fold == "reset":
        for p, k in zip(params, kept):
            g = p.grad
            p.grad = torch.zeros_like(p)
            p.grad.add_(k).add_(g)
    elif args.fold == "foreach":
        torch._foreach_add_([p.grad for p in params], kept)
    else:
        for p, k in zip(params, kept):
            p.grad.add_(k)
    opt.step()
