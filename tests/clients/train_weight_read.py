"""A weight-normed layer whose effective weight the loop logs after each step: plain torch,
the pin of Note [A parametrized weight read is no forward] (memledger/trace/steps.py), found
with pytorch-tcn (tests/clients/train_tcn.py), which CI may not install.

    python tests/clients/train_weight_read.py --steps 3
    memledger trace tests/clients/train_weight_read.py --steps 2 -o wr.ledger

`model[0]` is `weight_norm(nn.Linear(64, 64))`: reading `model[0].weight` calls its
`ParametrizationList` (a module with parameters) outside any forward, under gradients, so
`w` keeps that small graph until the next step's read replaces it.

`--renorm`: the normalized transformer's way (nGPT-pytorch's `NormLinear`, found with
tests/clients/train_ngpt.py): `model[0]` is an `nn.Linear(256, 256)` whose weight a
parametrization keeps on the unit sphere (rows l2-normed at each read), and an optimizer
step post hook writes the normed weight back into `parametrizations.weight.original`
under no_grad, as nGPT's `register_step_post_hook` does; SGD, a (4, 256) batch. That
read, inside `optimizer.step()`, is no forward either (Note [A weight read without
gradients], memledger/trace/steps.py).

`--built`: nGPT's `manual_norm_weights` way: no parametrization, each `SphereLinear`
normalizes its new weight in its constructor through a method that calls its own norm
module (`self.norm(self.linear.weight)`, under no_grad), and the loop renormalizes after
each step the same way. Those calls while the model is built are no forward (Note [A
module called while a module is built], memledger/trace/roots.py).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.utils import parametrize
from torch.nn.utils.parametrizations import weight_norm


class RowsOnSphere(nn.Module):
    """The parametrization: each row of the weight l2-normed (nGPT's `L2Norm`)."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return F.normalize(w, dim=-1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--renorm", action="store_true")
    p.add_argument("--built", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    if args.renorm:
        renorm_main(args.steps)
        return
    if args.built:
        built_main(args.steps)
        return
    model = nn.Sequential(weight_norm(nn.Linear(64, 64)), nn.ReLU(), nn.Linear(64, 8))
    optimizer = torch.optim.Adam(model.parameters())
    for step in range(args.steps):
        x = torch.randn(32, 64)
        loss = model(x).square().mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        w = model[0].weight   # the effective weight, logged
        print(f"step {step}  loss {loss.item():.4f}  |w| {w.norm().item():.4f}")


def renorm_main(steps: int) -> None:
    model = nn.Sequential(nn.Linear(256, 256, bias=False), nn.ReLU(), nn.Linear(256, 8))
    parametrize.register_parametrization(model[0], "weight", RowsOnSphere())
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)

    @torch.no_grad()
    def renorm(*_) -> None:   # the normed weight (a read: 256 KiB) into the original
        model[0].parametrizations.weight.original.copy_(model[0].weight)

    optimizer.register_step_post_hook(renorm)
    for step in range(steps):
        loss = model(torch.randn(4, 256)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


class SphereLinear(nn.Module):
    """A Linear kept on the sphere by hand (nGPT's `NormLinear(parametrize=False)`)."""

    def __init__(self, dim_in: int, dim_out: int) -> None:
        super().__init__()
        self.linear = nn.Linear(dim_in, dim_out, bias=False)
        self.norm = RowsOnSphere()
        self.renorm_()   # a module call while the model is built

    @torch.no_grad()
    def renorm_(self) -> None:
        self.linear.weight.copy_(self.norm(self.linear.weight))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.linear(x)


def built_main(steps: int) -> None:
    model = nn.Sequential(SphereLinear(64, 256), nn.ReLU(), SphereLinear(256, 8))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(steps):
        loss = model(torch.randn(4, 64)).square().mean()
        loss.backward()
        optimizer.step()
        optimizer.zero_grad()
        model[0].renorm_()
        model[2].renorm_()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
