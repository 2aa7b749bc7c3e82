"""An averaged copy of the model, updated after every optimizer step.

    python ema.py                  # an EMA copy updated under torch.no_grad(): no finding
    python ema.py --swa            # torch.optim.swa_utils.AveragedModel + SWALR: no finding
    python ema.py --foreach        # the EMA by torch._foreach_lerp_ (timm's ModelEmaV3): none
    python ema.py --bug            # the EMA update outside no_grad: its parameters get a graph
                                   # that grows every step (cross_step_retention, error)
    python ema.py --bug --foreach  # the same with _foreach_lerp_
    python ema.py --bug --no-eval  # the same, the EMA never run in the window

The buggy EMA once crashed the script under the doctor (a hook on a parameter that was no
longer a leaf), and its parameters, held only by the module, went unreported.
"""
import copy
import sys

import torch
from torch import nn
from torch.optim.swa_utils import SWALR, AveragedModel

BUG = "--bug" in sys.argv
SWA = "--swa" in sys.argv
FOREACH = "--foreach" in sys.argv
EVAL = "--no-eval" not in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
if SWA:
    ema = AveragedModel(model)
    swa_sched = SWALR(opt, swa_lr=0.05)
else:
    ema = copy.deepcopy(model).eval().requires_grad_(False)


def ema_update(decay=0.99):
    ema_params, params = list(ema.parameters()), list(model.parameters())
    if FOREACH:
        torch._foreach_lerp_(ema_params, params, 1 - decay)
    else:
        for e, p in zip(ema_params, params):
            e.mul_(decay).add_(p, alpha=1 - decay)


for step in range(4):
    x, y = torch.randn(8, 8), torch.randint(0, 2, (8,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if SWA:
        ema.update_parameters(model)
        swa_sched.step()
    elif BUG:
        ema_update()
    else:
        with torch.no_grad():
            ema_update()
    if EVAL:
        with torch.no_grad():
            ema(torch.randn(8, 8))
