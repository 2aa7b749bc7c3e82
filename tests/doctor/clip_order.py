"""Planted bugs (check 8): gradient clipping where it cannot clip the step's gradients.

    --bug before   clip_grad_norm_ between zero_grad() and backward(): it clips nothing,
                   backward then fills the gradients the step uses
    --bug after    clip_grad_norm_ after optimizer.step(): the step used them unclipped
    --bug value    clip_grad_value_, after optimizer.step()
    --bug scaler   GradScaler (bfloat16 autocast): clip_grad_norm_ before
                   scaler.unscale_(opt): it clips the scaled gradients
    --fixed        clip between backward() and step() (after scaler.unscale_ with scaler)
    --accum 2      2 micro-batches per step, the clip after the loop
    --log-norm     also clip_grad_norm_(..., inf) after step(): the norm read for logging
"""
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "before"
FIXED = "--fixed" in sys.argv
K = int(sys.argv[sys.argv.index("--accum") + 1]) if "--accum" in sys.argv else 1
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 2))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
scaler = torch.amp.GradScaler("cpu", enabled=BUG == "scaler")
clip = torch.nn.utils.clip_grad_value_ if BUG == "value" else torch.nn.utils.clip_grad_norm_
for step in range(4):
    opt.zero_grad()
    if BUG == "before" and not FIXED:
        clip(model.parameters(), 1.0)
    for micro in range(K):
        x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=BUG == "scaler"):
            loss = nn.functional.cross_entropy(model(x), y) / K
        scaler.scale(loss).backward()
    if BUG == "scaler" and FIXED:
        scaler.unscale_(opt)
    if FIXED or BUG == "scaler":
        clip(model.parameters(), 1.0)
    scaler.step(opt)
    scaler.update()
    if BUG in ("after", "value") and not FIXED:
        clip(model.parameters(), 1.0)
    if "--log-norm" in sys.argv:
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf"))
