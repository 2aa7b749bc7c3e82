"""Planted bugs (check 5): update accounting.

    --bug nonfinite   step 2's loss is NaN and step() runs on it
    --bug scaler      GradScaler: step 2's gradients are infinite, scaler.step skips it
    --bug scaler2     GradScaler: the first two steps' gradients are infinite (a scale still
                      calibrating); the scheduler steps once per scaler.step(), as torch's
                      AMP recipe does: on time, though ahead of the optimizer's first step
    --bug zeroed      zero_grad between backward and step
    --bug lastlayer   the last layer's gradients dropped between backward and step, the
                      rest kept (DINO's cancel_gradients_last_layer): on purpose, no bug
    --bug sched       the LR scheduler steps before the optimizer, twice per step
    --bug sched1      the LR scheduler steps before the optimizer, once per step
    --fixed           the same loop without the bug
"""
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "nonfinite"
FIXED = "--fixed" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
sched = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.9)
scaler = torch.amp.GradScaler("cpu", enabled=BUG in ("scaler", "scaler2"))
for step in range(5):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    if step == 1 and BUG in ("nonfinite", "scaler") and not FIXED:
        loss = loss * float("inf")
    if step < 2 and BUG == "scaler2":
        loss = loss * float("inf")
    if BUG in ("sched", "sched1") and not FIXED:
        sched.step()
        if BUG == "sched":
            sched.step()
    opt.zero_grad()
    scaler.scale(loss).backward()
    if BUG == "zeroed" and not FIXED:
        opt.zero_grad()
    if BUG == "lastlayer":
        for p in model[2].parameters():
            p.grad = None
    scaler.step(opt)
    scaler.update()
    if BUG not in ("sched", "sched1") or FIXED:
        sched.step()
