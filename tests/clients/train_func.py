"""A training loop that differentiates with torch.func instead of loss.backward():

    python tests/clients/train_func.py            # grad(loss_fn)(params, x, y)
    python tests/clients/train_func.py --vmap     # per-sample gradients (DP-SGD style)
    python tests/clients/train_func.py --by-hand func   # no optimizer: functional SGD

`--by-hand` updates functional parameters itself, torchopt's functional style, no optimizer
(the doctor watches it with `--steps-by forward`): `func` (`grad(loss_fn)` then `p - lr *
g`: no history), `autograd` (`torch.autograd.grad` on leaves, the update detached and made
a leaf again), `autograd-graph` (the planted bug: the update not detached, so each step's
parameters hang on the graph of every step before).

torch.func's transforms refuse saved-tensor hooks, which `memledger trace` uses: memledger's
own step aside while a transform runs (Note [torch.func transforms under memledger's
hooks], memledger/trace/func_transforms.py). The doctor uses none and checks the loop.
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn
from torch.func import functional_call, grad, vmap


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--vmap", action="store_true")
    p.add_argument("--by-hand", choices=["func", "autograd", "autograd-graph"],
                   help="update functional parameters by hand, no optimizer")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(params, x, y):
        return F.cross_entropy(functional_call(model, params, (x,)), y)

    if args.by_hand:
        by_hand(args, model, loss_fn)
        return
    for _ in range(args.steps):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        params = {n: q.detach() for n, q in model.named_parameters()}
        if args.vmap:
            per_sample = vmap(grad(lambda p_, x_, y_: loss_fn(p_, x_[None], y_[None])),
                              in_dims=(None, 0, 0))(params, x, y)
            g = {n: v.mean(0) for n, v in per_sample.items()}
        else:
            g = grad(loss_fn)(params, x, y)
        for n, q in model.named_parameters():
            q.grad = g[n]
        opt.step()


def by_hand(args, model: nn.Module, loss_fn, lr: float = 0.1) -> None:
    grads_by_func = args.by_hand == "func"
    params = {n: q.detach().requires_grad_(not grads_by_func)
              for n, q in model.named_parameters()}
    for step in range(args.steps):
        x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
        if grads_by_func:
            g = grad(loss_fn)(params, x, y)
        else:
            loss = loss_fn(params, x, y)
            g = dict(zip(params, torch.autograd.grad(loss, list(params.values()))))
        params = {n: p - lr * g[n] for n, p in params.items()}
        if args.by_hand == "autograd":
            params = {n: p.detach().requires_grad_() for n, p in params.items()}


if __name__ == "__main__":
    main()
