"""Parameters read where their module does not own them directly: layers kept in an
`nn.ParameterList` (read by the module holding the list), and a module run through
`torch.func.functional_call` with other tensors in its parameters' places (titans-pytorch's
NeuralMemory runs its memory MLP so).

    python param_slots.py                  # no finding
    python param_slots.py --bug list       # the ParameterList MLP's output dropped from the
                                           # loss: "ran but the output never reached the loss"
    python param_slots.py --bug func       # the MLP run with copies of its weights: "ran, but
                                           # with other tensors in their place"
"""
import sys

import torch
from torch import nn
from torch.func import functional_call

BUG = sys.argv[sys.argv.index("--bug") + 1] if "--bug" in sys.argv else ""
torch.manual_seed(0)


class ListMLP(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.weights = nn.ParameterList(nn.Parameter(torch.randn(d, d) / d ** 0.5)
                                        for _ in range(2))

    def forward(self, x):
        for i, w in enumerate(self.weights):
            x = x @ w if i == 0 else torch.tanh(x) @ w
        return x


class Net(nn.Module):
    def __init__(self, d=8):
        super().__init__()
        self.inp = nn.Linear(4, d)
        self.mlp = ListMLP(d)
        # per-call copies of the MLP's weights, trained in their place (as NeuralMemory's
        # `memory_model_parameters`)
        self.fast = nn.ParameterList(nn.Parameter(w.detach().clone())
                                     for w in self.mlp.weights)
        self.head = nn.Linear(d, 2)

    def forward(self, x):
        h = self.inp(x)
        if BUG == "func":
            m = functional_call(self.mlp, {f"weights.{i}": w for i, w in enumerate(self.fast)},
                                (h,))
        else:
            m = self.mlp(h)
        if BUG != "list":
            h = h + m
        return self.head(h)


net = Net()
params = [p for n, p in net.named_parameters() if BUG == "func" or not n.startswith("fast")]
opt = torch.optim.Adam(params, lr=1e-3)
for step in range(4):
    x, y = torch.randn(6, 4), torch.randint(0, 2, (6,))
    loss = nn.functional.cross_entropy(net(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
