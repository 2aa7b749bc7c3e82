"""Planted bug (check 1): the path from the loss to blocks.0 is cut, so it gets no gradient.

    python cut.py --cut detach|data|numpy|no_grad|no_grad_norm|checkpoint      # the bug
    python cut.py --cut frozen      # blocks.0 run in eval under no_grad: frozen, a warning
    python cut.py --cut frozen --encoder --validate   # the frozen part a Sequential put in
                                    # eval by one call, and a validation under no_grad
                                    # between steps: the same warning (once an error)
    python cut.py --cut detach --fixed                              # the same loop, fixed
"""
import sys

import numpy as np
import torch
from torch import nn
from torch.utils.checkpoint import checkpoint

CUT = sys.argv[sys.argv.index("--cut") + 1] if "--cut" in sys.argv else "detach"
FIXED = "--fixed" in sys.argv
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Linear(8, 8), nn.Linear(8, 8)])
        if "--encoder" in sys.argv:   # discrete-key-value-bottleneck-pytorch's encoder
            self.blocks[0] = nn.Sequential(nn.Linear(8, 8), nn.GELU(), nn.Linear(8, 8))
        self.head = nn.Linear(8, 2)
        if CUT == "no_grad_norm":   # F.layer_norm hands weight and bias over by keyword
            self.norm = nn.LayerNorm(8)

    def forward(self, x):
        if CUT == "checkpoint":   # the LoRA case: the checkpointed input needs no grad
            h = checkpoint(self.blocks[0], x, use_reentrant=FIXED is False)
        elif CUT == "frozen" and not FIXED:   # a part the model keeps frozen (an encoder)
            self.blocks[0].eval()
            with torch.no_grad():
                h = self.blocks[0](x)
        else:
            h = self.blocks[0](x)
        if FIXED or CUT == "checkpoint":
            pass
        elif CUT == "detach":
            h = h.detach()
        elif CUT == "data":
            h = h.data
        elif CUT == "numpy":
            h = torch.from_numpy(np.tanh(h.detach().numpy()))
        elif CUT == "no_grad":
            with torch.no_grad():
                h = torch.relu(h)
        elif CUT == "no_grad_norm":
            with torch.no_grad():
                h = self.norm(h)
        return self.head(torch.relu(self.blocks[1](h)))


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    loss = nn.functional.cross_entropy(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if "--validate" in sys.argv:
        model.eval()
        with torch.no_grad():
            model(torch.randn(4, 8))
        model.train()
