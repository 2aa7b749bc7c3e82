"""Planted bug (check 3): gradients never zeroed, so each step adds the previous ones.

    python grad_leak.py            # the bug: no zero_grad at all
    python grad_leak.py --fixed    # deliberate accumulation: 2 backward, 1 step, then zero
    python grad_leak.py --clip     # the bug, with clip_grad_norm_ between backward and step
                                   # (the clip changes .grad in place: the leak once went unseen)
    python grad_leak.py --fixed --clear HOW   # the --fixed loop clearing each gradient by
                                   # hand, not by zero_grad: `data` (`p.grad.data.zero_()`,
                                   # once a false grad_leak), `mul` (`.mul_(0)`), `fill`,
                                   # `mul-tensor`, `imul-tensor`, `zeros-like`, `times-zero`,
                                   # `data-set` (`p.grad.data = torch.zeros_like(p.grad)`:
                                   # once a false grad_leak) as in late_grad_write.py
    python grad_leak.py --fixed --clear data --skip-head   # ... forgetting the last
                                   # layer's two: the bug again, for those two only
"""
import sys

import torch
from torch import nn

FIXED = "--fixed" in sys.argv
CLIP = "--clip" in sys.argv
CLEAR = sys.argv[sys.argv.index("--clear") + 1] if "--clear" in sys.argv else ""
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    for micro in range(2 if FIXED else 1):
        x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
        loss = nn.functional.cross_entropy(model(x), y) / 2
        loss.backward()
    if CLIP:
        nn.utils.clip_grad_norm_(model.parameters(), 0.5)
    opt.step()
    if FIXED and not CLEAR:
        opt.zero_grad()
    cleared = model[0] if "--skip-head" in sys.argv else model
    for p in cleared.parameters() if FIXED and CLEAR else ():
        if CLEAR == "data":
            p.grad.data.zero_()
        elif CLEAR == "mul":
            p.grad.mul_(0)
        elif CLEAR == "mul-tensor":
            p.grad.mul_(torch.zeros(()))
        elif CLEAR == "imul-tensor":
            p.grad *= torch.tensor(0.)
        elif CLEAR == "zeros-like":
            p.grad = torch.zeros_like(p)
        elif CLEAR == "times-zero":
            p.grad = p.grad * 0
        elif CLEAR == "data-set":
            p.grad.data = torch.zeros_like(p.grad)
        else:
            p.grad.fill_(0)
