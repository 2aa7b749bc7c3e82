"""A neural SDE trained with torchsde, as its README and examples write one: an `nn.Module`
with `f` (drift) and `g` (diffusion) methods and `noise_type` / `sde_type` attributes,
integrated by `torchsde.sdeint` from t=0 to 1, fitted by MSE to the mean path of an
Ornstein-Uhlenbeck process (drawn once, seeded), Adam. The drift is an MLP of
`drift.blocks.*` (Linear + Tanh each), the diffusion a diagonal `sigma` net. Brownian
motion is torchsde's `BrownianInterval`: each sample is drawn from a
`torch.Generator(...).manual_seed(seed)` of its own, and the interval keeps an LRU cache of
the increments it handed out. Tiny, seeded (numpy's global seed draws the intervals'
entropy), nothing downloaded.

    python tests/clients/train_torchsde.py --steps 3 --mode euler
    memledger trace tests/clients/train_torchsde.py --steps 2 -o sde.ledger -- --mode srk

Modes (`--mode`):

- `euler`: diagonal Ito noise, `sdeint(..., method="euler")`; a new BrownianInterval per
  call (torchsde's default when no `bm` is given).
- `srk`: the stochastic Runge-Kutta solver (strong order 1.5): `sdeint` asks the interval
  for space-time Levy areas too (`levy_area_approximation="space-time"`), one interval
  built by the script each step.
- `adjoint`: Stratonovich noise, `sdeint_adjoint(..., method="reversible_heun",
  adjoint_method="adjoint_reversible_heun")`: the forward solve keeps no graph; the custom
  Function's backward solves the adjoint SDE, calling `f` and `g` again inside backward.
- `logqp`: a latent SDE: a prior drift `h`, `sdeint(..., logqp=True)` returns the path and
  the KL term per step, added to the loss (`names={"drift": "f", "diffusion": "g"}`).
- `kept`: one BrownianInterval built before the loop and handed to every `sdeint` (the
  same noise each step): its cache holds increments across steps.
"""

import argparse

import numpy as np
import torch
from torch import nn

import torchsde

BATCH, STATE, HIDDEN, T = 16, 4, 32, 6


class Block(nn.Module):
    def __init__(self, n_in: int, n_out: int) -> None:
        super().__init__()
        self.lin = nn.Linear(n_in, n_out)
        self.act = nn.Tanh()

    def forward(self, x):
        return self.act(self.lin(x))


class Drift(nn.Module):
    def __init__(self, extra: int = 0) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(STATE + 1 + extra, HIDDEN), Block(HIDDEN, HIDDEN),
                                     Block(HIDDEN, HIDDEN)])
        self.out = nn.Linear(HIDDEN, STATE)

    def forward(self, t, y):
        h = torch.cat([y, t.expand(y.size(0), 1)], dim=1)
        for b in self.blocks:
            h = b(h)
        return self.out(h)


class NeuralSDE(nn.Module):
    noise_type = "diagonal"

    def __init__(self, sde_type: str = "ito", latent: bool = False) -> None:
        super().__init__()
        self.sde_type = sde_type
        self.drift = Drift()
        self.sigma = nn.Sequential(nn.Linear(STATE, HIDDEN), nn.Softplus(),
                                   nn.Linear(HIDDEN, STATE), nn.Sigmoid())
        if latent:
            self.prior = nn.Linear(STATE, STATE)   # the prior's drift h

    def f(self, t, y):
        return self.drift(t, y)

    def g(self, t, y):
        return 0.3 * self.sigma(y)

    def h(self, t, y):
        return self.prior(y)


def ou_target(ts: torch.Tensor) -> torch.Tensor:
    """The mean path of an OU process dX = -X dt + 0.3 dW from X0 = 1: exp(-t), per state."""
    return torch.exp(-ts)[:, None, None].expand(len(ts), 1, STATE)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="euler",
                   choices=["euler", "srk", "adjoint", "logqp", "kept"])
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    np.random.seed(0)   # torchsde draws each BrownianInterval's entropy from numpy

    sde_type = "stratonovich" if args.mode == "adjoint" else "ito"
    sde = NeuralSDE(sde_type, latent=args.mode == "logqp")
    opt = torch.optim.Adam(sde.parameters(), lr=1e-3)
    ts = torch.linspace(0.0, 1.0, T)
    target = ou_target(ts)
    y0 = torch.ones(BATCH, STATE)
    kept = torchsde.BrownianInterval(t0=0.0, t1=1.0, size=(BATCH, STATE), entropy=7) \
        if args.mode == "kept" else None

    for step in range(args.steps):
        opt.zero_grad()
        kl = None
        if args.mode == "euler":
            ys = torchsde.sdeint(sde, y0, ts, method="euler", dt=0.1)
        elif args.mode == "srk":
            bm = torchsde.BrownianInterval(t0=0.0, t1=1.0, size=(BATCH, STATE),
                                           levy_area_approximation="space-time",
                                           entropy=step)
            ys = torchsde.sdeint(sde, y0, ts, bm=bm, method="srk", dt=0.1)
        elif args.mode == "adjoint":
            ys = torchsde.sdeint_adjoint(sde, y0, ts, method="reversible_heun",
                                         adjoint_method="adjoint_reversible_heun", dt=0.1)
        elif args.mode == "logqp":
            ys, kl = torchsde.sdeint(sde, y0, ts, method="euler", dt=0.1, logqp=True,
                                     names={"drift": "f", "diffusion": "g"})
        else:
            ys = torchsde.sdeint(sde, y0, ts, bm=kept, method="euler", dt=0.1)
        loss = ((ys.mean(dim=1, keepdim=True) - target) ** 2).mean()
        if kl is not None:
            loss = loss + 0.1 * kl.mean()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
