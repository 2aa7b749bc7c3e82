"""An optimizer built inside the training loop (check `optimizer_reset`).

    python fresh_optimizer.py               # Adam built again every step: its moments start over
    python fresh_optimizer.py --fixed       # built once, before the loop
    python fresh_optimizer.py --opt sgd     # plain SGD built every step: no state, nothing lost
    python fresh_optimizer.py --opt sgd --keep-last   # ... the last one kept a step more, and
                                    # dropped just before the next is built (which may take
                                    # its address: one optimizer at a time all the same)
    python fresh_optimizer.py --unfreeze    # built once more when the head's layers are unfrozen
                                    # (a phase change, not a reset every step)
"""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--fixed", action="store_true")
p.add_argument("--opt", choices=["adam", "sgd"], default="adam")
p.add_argument("--unfreeze", action="store_true")
p.add_argument("--keep-last", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()


def make_optimizer(params):
    if ARGS.opt == "sgd":
        return torch.optim.SGD(params, lr=0.1)
    return torch.optim.Adam(params, lr=1e-3)


torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
if ARGS.unfreeze:
    model[0].requires_grad_(False)
opt = make_optimizer([p for p in model.parameters() if p.requires_grad])
last = None
for step in range(ARGS.steps):
    if ARGS.keep_last:
        last = None          # the one before last goes here: the next may take its address
        last, opt = opt, None
    if not ARGS.fixed and not ARGS.unfreeze:
        opt = make_optimizer(model.parameters())
    if ARGS.unfreeze and step == 1:
        model[0].requires_grad_(True)
        opt = make_optimizer(model.parameters())
    x = torch.randn(8, 16)
    loss = model(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
