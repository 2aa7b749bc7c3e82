"""A training loss with no autograd history: backward raises at once (check `cut_graph`).

    python no_history.py --cut no_grad   # the forward helper carries @torch.no_grad()
    python no_history.py --cut detach    # the model's output detached before the loss
    python no_history.py --fixed         # the forward with grad enabled
"""
import argparse

import torch
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--cut", choices=["no_grad", "detach"], default="no_grad")
p.add_argument("--fixed", action="store_true")
p.add_argument("--steps", type=int, default=3)
ARGS = p.parse_args()

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)


@torch.no_grad()
def predict(x):
    return model(x)


def forward(x):
    if ARGS.fixed:
        return model(x)
    if ARGS.cut == "no_grad":
        return predict(x)
    return model(x).detach()


for step in range(ARGS.steps):
    x = torch.randn(8, 16)
    loss = forward(x).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
