"""A scaled activation compiled with `torch.jit.trace` at set-up, as
`e3nn.util.jit.compile` traces each of e3nn's normalised activations (`f(x).mul(cst)` on
a slice of the features), then a plain training loop: no finding.

    python jit_traced.py

torch.jit.trace checks its graph by tracing again under no_grad and comparing the two; under
the doctor's probe that second graph once named a value after a local variable of the
probe's, and the check failed ("Graphs differed across invocations!"): the doctor could
not watch the script (Note [No tensor locals where ops are called] in
memledger/trace/doctor_probe.py).
"""
import torch
from torch import nn


class ScaledSigmoid(nn.Module):
    def forward(self, x):
        return torch.sigmoid(x.narrow(-1, 0, 8)).mul(1.84)


torch.manual_seed(0)
act = torch.jit.trace(ScaledSigmoid(), (torch.randn(4, 16),))
model = nn.Sequential(nn.Linear(4, 16), act, nn.Linear(8, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.1)
g = torch.Generator().manual_seed(1)
for step in range(3):
    x, y = torch.randn(32, 4, generator=g), torch.randn(32, 1, generator=g)
    loss = nn.functional.mse_loss(model(x), y)
    opt.zero_grad()
    loss.backward()
    opt.step()
