"""A dead branch whose output is stabilised by its own detached maximum (the log-sum-exp
idiom of a Sinkhorn normalisation: hyper-connections' mHC `log_alpha - log_alpha.amax(
dim=-2, keepdim=True).detach()`): the branch never reaches the loss, so its parameters get
no gradient. That is an unused branch (a warning), not a path cut by `.detach()`: the
detach cuts only the maximum, and the tensor it was taken from flows on with its graph.

    python dead_stabilized.py --stabilizer amax      # side.weight, side.bias: unused
    python dead_stabilized.py --stabilizer chain     # (amax + eps).detach(): the same
    python dead_stabilized.py --stabilizer none      # the same branch, no stabiliser
    python dead_stabilized.py --stabilizer amax --used   # the branch reaches the loss
    python dead_stabilized.py --stabilizer amax --used --empty   # and a parameter of 0
                                    # elements, read only when it has some: no finding
"""
import sys

import torch
from torch import nn

HOW = sys.argv[sys.argv.index("--stabilizer") + 1] if "--stabilizer" in sys.argv else "amax"
USED = "--used" in sys.argv
EMPTY = "--empty" in sys.argv
torch.manual_seed(0)


class Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.body = nn.Linear(8, 8)
        self.side = nn.Linear(8, 8)
        self.head = nn.Linear(8, 2)
        if EMPTY:   # register tokens switched off by their count (mmdit's MMDiT)
            self.registers = nn.Parameter(torch.zeros(0, 8))

    def forward(self, x):
        s = self.side(x)
        if HOW == "amax":
            s = s - s.amax(dim=-1, keepdim=True).detach()
        elif HOW == "chain":
            s = s - (s.amax(dim=-1, keepdim=True) + 1e-6).detach()
        s = s.exp()
        h = torch.relu(self.body(x))
        if EMPTY and self.registers.numel():
            h = h + self.registers.sum(0)
        return self.head(h + s if USED else h), s


model = Net()
opt = torch.optim.SGD(model.parameters(), lr=0.1)
for step in range(3):
    x, y = torch.randn(4, 8), torch.randint(0, 2, (4,))
    out, _ = model(x)
    loss = nn.functional.cross_entropy(out, y)
    opt.zero_grad()
    loss.backward()
    opt.step()
