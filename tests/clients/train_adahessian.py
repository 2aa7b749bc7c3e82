"""AdaHessian (torch-optimizer's `Adahessian`): the loss's backward builds a graph
(`loss.backward(create_graph=True)`), and `step()` takes Hutchinson's estimate of the
Hessian's diagonal by a second `torch.autograd.grad` through the gradients. `.grad` holds the
graph of the first backward until the next `zero_grad()`.

    python tests/clients/train_adahessian.py --steps 4
    memledger compare tests/clients/train_adahessian.py -p 'checkpoint:*' -- --steps 4

`predict` refuses policies on the layers (NotPredicted; `compare` measures them): Note [Read
by a backward that builds a graph] in memledger/trace/collector.py.
"""
import argparse
import warnings

import torch
import torch_optimizer
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=4)
args = p.parse_args()
warnings.filterwarnings("ignore", message="Using backward\\(\\) with create_graph=True")
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(32, 128), nn.Tanh(), nn.Linear(128, 128), nn.Tanh(),
                      nn.Linear(128, 4))
opt = torch_optimizer.Adahessian(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
for step in range(args.steps):
    x, y = torch.randn(64, 32, generator=g), torch.randint(0, 4, (64,), generator=g)
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward(create_graph=True)
    opt.step()
    print(step, round(loss.item(), 4))
