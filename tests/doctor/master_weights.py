"""Mixed precision by hand: a bf16 model and an optimizer on fp32 master copies whose
gradients the script copies in after backward. The master copies get no gradient from
backward and the model's parameters are in no optimizer, yet the model trains: not a stale
optimizer."""
import torch
import torch.nn.functional as F
from torch import nn

torch.manual_seed(0)
model = nn.Sequential(nn.Linear(8, 8), nn.ReLU(), nn.Linear(8, 2)).bfloat16()
master = [p.detach().float().clone().requires_grad_(True) for p in model.parameters()]
opt = torch.optim.AdamW(master, lr=1e-3)
for step in range(4):
    x, y = torch.randn(4, 8, dtype=torch.bfloat16), torch.randint(0, 2, (4,))
    loss = F.cross_entropy(model(x).float(), y)
    model.zero_grad()
    loss.backward()
    for m, p in zip(master, model.parameters()):
        m.grad = p.grad.float()
    opt.step()
    with torch.no_grad():
        for m, p in zip(master, model.parameters()):
            p.copy_(m)
