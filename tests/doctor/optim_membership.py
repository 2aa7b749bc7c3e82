"""Planted bugs (check 2).

    --bug frozen     fc1 frozen after step 1, zero_grad(set_to_none=False): AdamW's weight
                     decay and momentum keep moving it (fixed: set_to_none=True)
    --bug none_opt   the optimizer was given fc2 only: fc1 trains in no optimizer
    --bug two_opts   fc1 is in two optimizers
    --bug stale      the optimizer was built, then the model rebuilt as float64 (new
                     Parameters): the optimizer holds the old ones (fixed: rebuilt before)
    --bug copies     the loss is computed by a deep copy of the model made in every step
                     (new leaves cut from the model's parameters, as higher's innerloop_ctx
                     makes with copy_initial_weights=True): backward reaches the copies,
                     never the model (fixed: torch.func.functional_call on `p.clone()`)
    --fixed          one optimizer, every parameter once
    --fixed --unfreeze  fc1 frozen at first; in step 2 it is unfrozen and a new optimizer
                     over every parameter replaces the first (dropped): a hand-over, not two
                     optimizers of fc2
"""
import copy
import sys

import torch
from torch import nn

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else "frozen"
FIXED = "--fixed" in sys.argv
UNFREEZE = "--unfreeze" in sys.argv
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2))
fc1, fc2 = model[0], model[2]
if BUG == "none_opt" and not FIXED:
    opts = [torch.optim.AdamW(fc2.parameters(), lr=0.01)]
elif BUG == "two_opts" and not FIXED:
    opts = [torch.optim.AdamW(model.parameters(), lr=0.01),
            torch.optim.SGD(fc1.parameters(), lr=0.01)]
elif UNFREEZE:
    fc1.requires_grad_(False)
    opts = [torch.optim.AdamW(fc2.parameters(), lr=0.01)]
else:
    opts = [torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.1)]
if BUG == "stale":
    model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).double()
    if FIXED:
        opts = [torch.optim.AdamW(model.parameters(), lr=0.01)]
dtype = torch.float64 if BUG == "stale" else torch.float32
for step in range(3):
    if UNFREEZE and step == 1:
        fc1.requires_grad_(True)
        opts = [torch.optim.AdamW(model.parameters(), lr=0.01)]
    x, y = torch.randn(4, 8, dtype=dtype), torch.randint(0, 2, (4,))
    if BUG == "copies" and FIXED:
        fast = {n: p.clone() for n, p in model.named_parameters()}
        loss = nn.functional.cross_entropy(torch.func.functional_call(model, fast, (x,)), y)
    elif BUG == "copies":   # a copy of its own per step, as higher's monkeypatch makes
        loss = nn.functional.cross_entropy(copy.deepcopy(model)(x), y)
    else:
        loss = nn.functional.cross_entropy(model(x), y)
    for o in opts:
        o.zero_grad(set_to_none=FIXED or BUG != "frozen")
    loss.backward()
    for o in opts:
        o.step()
    if step == 0 and BUG == "frozen":
        fc1.requires_grad_(False)    # freeze after the first step
