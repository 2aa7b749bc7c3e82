"""A neural ODE on torchdiffeq (pure PyTorch): an encoder `enc`, an ODE block whose
dynamics `func` (an MLP, `func.net.*`) `odeint` integrates from t=0 to 1, a decoder `dec`;
MSE to a target, AdamW. Tiny shapes, seeded, nothing downloaded.

    python tests/clients/train_odeint.py --case rk4 --steps 3
    memledger trace tests/clients/train_odeint.py --steps 2 -o ode.ledger -- --case adjoint

`--case`:
  rk4       `odeint(func, h, t, method="rk4")` on 3 time points (2 fixed steps, each 4
            calls of `func`): autograd through every call
  dopri5    the adaptive solver (rtol 1e-3): the number of calls depends on the data
  adjoint   `odeint_adjoint(func, h, t, method="euler")`: the forward solve runs without
            a graph, and the custom Function's backward solves the adjoint ODE, calling
            `func` again under `enable_grad` inside backward
"""

import argparse

import torch
import torch.nn.functional as F
from torch import nn

D, H = 16, 64


class Func(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Sequential(nn.Linear(D, H), nn.Tanh()),
                                 nn.Sequential(nn.Linear(H, H), nn.Tanh()),
                                 nn.Linear(H, D))

    def forward(self, t, h):
        return self.net(h)


class Net(nn.Module):
    def __init__(self, case: str) -> None:
        super().__init__()
        self.case = case
        self.enc = nn.Sequential(nn.Linear(8, D), nn.Tanh())
        self.func = Func()
        self.dec = nn.Linear(D, 4)
        self.register_buffer("t", torch.linspace(0.0, 1.0, 3))

    def forward(self, x):
        from torchdiffeq import odeint, odeint_adjoint

        h = self.enc(x)
        if self.case == "adjoint":
            hs = odeint_adjoint(self.func, h, self.t, method="euler")
        elif self.case == "dopri5":
            hs = odeint(self.func, h, self.t, method="dopri5", rtol=1e-3, atol=1e-4)
        else:
            hs = odeint(self.func, h, self.t, method="rk4")
        return self.dec(hs[-1])


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="rk4")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.case)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    for step in range(args.steps):
        x, y = torch.randn(64, 8, generator=gen), torch.randn(64, 4, generator=gen)
        loss = F.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
