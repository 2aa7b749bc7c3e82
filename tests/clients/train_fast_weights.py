"""MAML by hand, as higher (facebookresearch) runs it: each step builds a functional copy of
the net (new module objects, made on the meta device so they allocate nothing), puts fast
weights in its modules' `_parameters` (plain tensors, not nn.Parameters: first `p.clone()`
of the net's parameters, then `w - lr * g`), unrolls an inner loop of
`autograd.grad(create_graph=True)` steps, and backpropagates the query loss through all of
it into the net, which Adam steps.

    python tests/clients/train_fast_weights.py --steps 3
    memledger trace tests/clients/train_fast_weights.py -o fw.ledger --steps 2
    memledger show fw.ledger     # parameter: the net's 8,848 B, not its clones too

`--no-clone`: the first fast weights are the net's own parameters (torch.func-style).
`--views`: the support and query sets are views of one batch.
"""
import argparse

import torch
import torch.nn.functional as F
from torch import nn

p = argparse.ArgumentParser()
p.add_argument("--steps", type=int, default=3)
p.add_argument("--inner", type=int, default=1)
p.add_argument("--views", action="store_true")
p.add_argument("--no-clone", action="store_true")
args = p.parse_args()

torch.manual_seed(0)


def make(device=None):
    return nn.Sequential(nn.Flatten(), nn.Linear(64, 32, device=device), nn.ReLU(),
                         nn.Linear(32, 4, device=device))


net = make()
opt = torch.optim.Adam(net.parameters(), lr=1e-3)
g = torch.Generator().manual_seed(1)
params = list(net.parameters())


def put(fnet, ws):
    for m, w, b in zip((fnet[1], fnet[3]), ws[::2], ws[1::2]):
        m._parameters["weight"], m._parameters["bias"] = w, b


for step in range(args.steps):
    if args.views:
        x = torch.randn(2, 8, 1, 8, 8, generator=g)
        xs, xq = x[0], x[1]
    else:
        xs, xq = torch.randn(8, 1, 8, 8, generator=g), torch.randn(8, 1, 8, 8, generator=g)
    y = torch.arange(4).repeat_interleave(2)
    fnet = make("meta")   # higher's `monkeypatch`: a copy of the modules, no weights of its own
    fast = params if args.no_clone else [w.clone() for w in params]
    put(fnet, fast)
    for _ in range(args.inner):
        loss = F.cross_entropy(fnet(xs), y)
        grads = torch.autograd.grad(loss, fast, create_graph=True)
        fast = [w - 0.1 * gr for w, gr in zip(fast, grads)]
        put(fnet, fast)
    outer = F.cross_entropy(fnet(xq), y)
    opt.zero_grad()
    outer.backward()
    opt.step()
    print(step, outer.item())
