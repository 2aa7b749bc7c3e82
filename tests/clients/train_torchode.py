"""Neural ODEs on torchode 1.0.1 (a parallel ODE solver: every sample of the batch has its
own time span, step size and step count; the solver's state lives in Python loops). As
torchode's README builds them: an `ODETerm` around an MLP vector field `vf` (`vf.net.*`), a
step method (`Dopri5`, `Tsit5`, `Heun`, `Euler`), a step-size controller
(`IntegralController`, `PIDController`, `FixedStepController`) and an `AutoDiffAdjoint`
(autograd through every step) or a `BacksolveAdjoint` (the forward solve without a graph,
the backward an augmented ODE solved backwards by `torch.func.vjp` under `vmap`), on an
`InitialValueProblem` whose samples end at different times. Fit to trajectories of a
damped spiral made in setup; tiny shapes, seeded, nothing downloaded.

    python tests/clients/train_torchode.py --model node --steps 3
    memledger trace tests/clients/train_torchode.py --steps 2 -o ode.ledger -- --model latent

`--model`:
  node      the vector field fit to 2-d trajectories (`vf.net`: 2 -> 32 -> 32 -> 2)
  latent    a latent ODE: an encoder `enc` reads the first observations into z0, the ODE
            runs in a 6-d latent space, a decoder `dec` maps each evaluated state back
`--method` dopri5 | tsit5 | heun | euler; `--controller` integral | pid | fixed (fixed:
dt0 = 0.1 for every sample); `--adjoint` autodiff | backsolve; `--opt` adam | sgd;
`--clip` clips the gradients' norm to 1.0; `--accum N` accumulates N micro-batches a step.
`--compile BACKEND` compiles the vector field (`aot_eager` needs no C++ toolchain).
`--bug clip_after_step` clips after `opt.step()` (a loop bug the doctor should find).
"""

import argparse

import torch
import torch.nn.functional as F
import torchode as to
from torch import nn

OBS, LATENT, H = 2, 6, 32


class VectorField(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.net = nn.Sequential(nn.Linear(dim, H), nn.Tanh(), nn.Linear(H, H), nn.Tanh(),
                                 nn.Linear(H, dim))

    def forward(self, t, y):
        return self.net(y)


def _method(name: str, term):
    return {"dopri5": to.Dopri5, "tsit5": to.Tsit5, "heun": to.Heun,
            "euler": to.Euler}[name](term=term)


def _controller(name: str, term):
    if name == "pid":
        return to.PIDController(atol=1e-4, rtol=1e-3, pcoeff=0.2, icoeff=0.5, dcoeff=0.0,
                                term=term)
    if name == "fixed":
        return to.FixedStepController()
    return to.IntegralController(atol=1e-4, rtol=1e-3, term=term)


class ODEModel(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        self.model, self.controller_name = args.model, args.controller
        dim = LATENT if args.model == "latent" else OBS
        if args.model == "latent":
            self.enc = nn.Sequential(nn.Linear(3 * OBS, H), nn.Tanh(), nn.Linear(H, LATENT))
            self.dec = nn.Sequential(nn.Linear(LATENT, H), nn.Tanh(), nn.Linear(H, OBS))
        self.vf = VectorField(dim)
        # `--compile BACKEND`: the vector field's forward compiled, as torchode's README
        # suggests for speed (the solver loop itself stays eager)
        f = torch.compile(self.vf, backend=args.compile) if args.compile else self.vf
        term = to.ODETerm(f)
        method, controller = _method(args.method, term), _controller(args.controller, term)
        if args.adjoint == "backsolve":
            self.solver = to.BacksolveAdjoint(term, method, controller)
        else:
            self.solver = to.AutoDiffAdjoint(method, controller)

    def forward(self, y0, t_eval):
        z0 = self.enc(y0.flatten(1)) if self.model == "latent" else y0
        dt0 = torch.full((z0.shape[0],), 0.1) if self.controller_name == "fixed" else None
        sol = self.solver.solve(to.InitialValueProblem(y0=z0, t_eval=t_eval), dt0=dt0)
        return self.dec(sol.ys) if self.model == "latent" else sol.ys


def spirals(n: int, n_eval: int, gen: torch.Generator):
    """`n` trajectories of y' = A y from random starts, each observed at `n_eval` times
    from 0 to its own end in [0.5, 2.0] (so each sample's solve takes its own steps)."""
    a = torch.tensor([[-0.1, 2.0], [-2.0, -0.1]])
    y0 = torch.randn(n, OBS, generator=gen)
    t_end = 0.5 + 1.5 * torch.rand(n, generator=gen)
    t_eval = torch.linspace(0.0, 1.0, n_eval)[None, :] * t_end[:, None]     # (n, T)
    ys = torch.einsum("ntij,nj->nti", torch.linalg.matrix_exp(a * t_eval[..., None, None]),
                      y0)                                                     # (n, T, 2)
    return y0, t_eval, ys


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="node", choices=["node", "latent"])
    p.add_argument("--method", default="dopri5")
    p.add_argument("--controller", default="integral")
    p.add_argument("--adjoint", default="autodiff")
    p.add_argument("--opt", default="adam")
    p.add_argument("--clip", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--bug", default="")
    p.add_argument("--compile", default="")
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    model = ODEModel(args)
    if args.opt == "sgd":
        opt = torch.optim.SGD(model.parameters(), lr=1e-2, momentum=0.9)
    else:
        opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    gen = torch.Generator().manual_seed(1)
    y0s, t_evals, targets = spirals(args.batch * args.accum * args.steps, 8, gen)
    n = 0
    for step in range(args.steps):
        opt.zero_grad(set_to_none=True)
        for _ in range(args.accum):
            sl = slice(n, n + args.batch)
            n += args.batch
            obs = targets[sl][:, :3] if args.model == "latent" else y0s[sl]
            pred = model(obs, t_evals[sl])
            loss = F.mse_loss(pred, targets[sl]) / args.accum
            loss.backward()
        if args.clip:
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        if args.bug == "clip_after_step":
            nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        print(f"step {step}  loss {loss.item():.5f}")


if __name__ == "__main__":
    main()
