"""A training loop that differentiates with torch.func instead of loss.backward():

    python tests/clients/train_func.py            # grad(loss_fn)(params, x, y)
    python tests/clients/train_func.py --vmap     # per-sample gradients (DP-SGD style)

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
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 4))
    opt = torch.optim.SGD(model.parameters(), lr=0.1)

    def loss_fn(params, x, y):
        return F.cross_entropy(functional_call(model, params, (x,)), y)

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


if __name__ == "__main__":
    main()
