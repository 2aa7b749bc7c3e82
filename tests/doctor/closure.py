"""optimizer.step(closure), as Lightning's Trainer steps: the forward and backward run inside
step() (Note [A step that runs its closure] in memledger/trace/doctor_probe.py).

    python closure.py --bug nan           # a NaN in the batch of step 3
    python closure.py --accum 2 --fixed   # the last of 2 micro-batches inside step(closure)
    python closure.py --lbfgs --fixed     # LBFGS: the closure runs several times per step
    python closure.py --lbfgs --frozen --fixed  # ... with a frozen bias among its parameters
    python closure.py --cut               # the forward detaches its hidden state
    python closure.py --clip after --fixed  # clipped inside the closure, after backward
    python closure.py --clip before       # clipped inside the closure, before backward
"""
import sys

import torch
import torch.nn.functional as F
from torch import nn

BUG = "--bug" in sys.argv
K = int(sys.argv[sys.argv.index("--accum") + 1]) if "--accum" in sys.argv else 1
CUT = "--cut" in sys.argv
CLIP = sys.argv[sys.argv.index("--clip") + 1] if "--clip" in sys.argv else ""
torch.manual_seed(0)


class Net(nn.Sequential):
    def forward(self, x):
        h = self[1](self[0](x))
        if CUT:
            h = h.detach()
        return self[2](h)


model = Net(nn.Linear(16, 32), nn.ReLU(), nn.Linear(32, 4))
if "--frozen" in sys.argv:
    # handed to the optimizer all the same (`model.parameters()`), as pykan's `fit` does: LBFGS
    # adds its zero update to it and copies it back after each line-search probe
    model[0].bias.requires_grad_(False)
if "--lbfgs" in sys.argv:
    opt = torch.optim.LBFGS(model.parameters(), lr=0.1, max_iter=3)
else:
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
for it in range(4 * K):
    x, y = torch.randn(8, 16), torch.randint(0, 4, (8,))
    if BUG and it == 2:
        x[0, 0] = float("nan")

    def closure():
        if it % K == 0:
            opt.zero_grad()
        loss = F.cross_entropy(model(x), y) / K
        if CLIP == "before":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        loss.backward()
        if CLIP == "after":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        return loss

    if it % K == K - 1:
        opt.step(closure)
    else:
        closure()
