"""Physics-informed networks with DeepXDE (pytorch backend), as its examples write them: a
geometry, the PDE's residual through `dde.grad.jacobian` / `dde.grad.hessian` (derivatives
of the network's output with respect to its input, by `autograd.grad(create_graph=True)`,
so the residual's backward runs through them), boundary and initial conditions,
`dde.data.PDE` / `dde.data.TimePDE` (collocation points sampled by the geometry, numpy),
`dde.nn.FNN` (a `linears` ModuleList of nn.Linear, tanh between them), then
`model.compile("adam", lr=...)` and `model.train(iterations=...)`; optionally the L-BFGS
stage after it (`model.compile("L-BFGS")`, `model.train()`: one `torch.optim.LBFGS.step`
runs `--lbfgs-iters` iterations, its closure once per function evaluation).

    python tests/clients/train_deepxde.py --pde poisson --steps 2
    memledger trace tests/clients/train_deepxde.py --steps 2 -o pinn.ledger -- --pde burgers
    memledger compare tests/clients/train_deepxde.py --steps 2 -p 'checkpoint:linears.1' \
        -- --pde poisson

PDEs (`--pde`):

- `poisson`: -u'' = pi^2 sin(pi x) on [-1, 1], u(-1) = u(1) = 0 (DeepXDE's
  `Poisson_Dirichlet_1d` example); `dde.grad.hessian`.
- `burgers`: u_t + u u_x = 0.01/pi u_xx on [-1, 1] x [0, 0.99], u = 0 on the boundary,
  u(x, 0) = -sin(pi x) (its `Burgers` example); `dde.grad.jacobian` for u_x and u_t, and
  `dde.grad.hessian` for u_xx, on a `GeometryXTime`.

`--optimizer adam` (the default), `lbfgs` (L-BFGS from the start) or `adam+lbfgs` (Adam for
`--steps` iterations, then L-BFGS, as DeepXDE's examples chain them). Seeded, tiny, nothing
downloaded. The backend is chosen by `DDE_BACKEND=pytorch` while DeepXDE is imported (and the
variable put back as it was): DeepXDE with no backend chosen writes ~/.deepxde/config.json.
"""

import argparse
import os

import numpy as np
import torch


def _import_deepxde():
    before = os.environ.get("DDE_BACKEND")
    os.environ["DDE_BACKEND"] = "pytorch"
    try:
        import deepxde
    finally:
        if before is None:
            del os.environ["DDE_BACKEND"]
        else:
            os.environ["DDE_BACKEND"] = before
    return deepxde


dde = _import_deepxde()


def poisson(args):
    def pde(x, y):
        dy_xx = dde.grad.hessian(y, x)
        return -dy_xx - np.pi ** 2 * torch.sin(np.pi * x)

    geom = dde.geometry.Interval(-1, 1)
    bc = dde.icbc.DirichletBC(geom, lambda x: 0, lambda _, on_boundary: on_boundary)
    return dde.data.PDE(geom, pde, bc, args.domain, 2, solution=lambda x: np.sin(np.pi * x),
                        num_test=args.test), 1


def burgers(args):
    def pde(x, y):
        dy_x = dde.grad.jacobian(y, x, i=0, j=0)
        dy_t = dde.grad.jacobian(y, x, i=0, j=1)
        dy_xx = dde.grad.hessian(y, x, i=0, j=0)
        return dy_t + y * dy_x - 0.01 / np.pi * dy_xx

    geom = dde.geometry.Interval(-1, 1)
    timedomain = dde.geometry.TimeDomain(0, 0.99)
    geomtime = dde.geometry.GeometryXTime(geom, timedomain)
    bc = dde.icbc.DirichletBC(geomtime, lambda x: 0, lambda _, on_boundary: on_boundary)
    ic = dde.icbc.IC(geomtime, lambda x: -np.sin(np.pi * x[:, 0:1]),
                     lambda _, on_initial: on_initial)
    return dde.data.TimePDE(geomtime, pde, [bc, ic], num_domain=args.domain,
                            num_boundary=args.boundary, num_initial=args.boundary,
                            num_test=args.test), 2


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--pde", choices=["poisson", "burgers"], default="poisson")
    p.add_argument("--optimizer", choices=["adam", "lbfgs", "adam+lbfgs"], default="adam")
    p.add_argument("--steps", type=int, default=3, help="Adam iterations")
    p.add_argument("--lbfgs-iters", type=int, default=2, help="L-BFGS iterations in all (maxiter)")
    p.add_argument("--lbfgs-per-step", type=int, default=1,
                   help="L-BFGS iterations per optimizer step (DeepXDE's iter_per_step)")
    p.add_argument("--domain", type=int, default=16, help="collocation points inside")
    p.add_argument("--boundary", type=int, default=4, help="boundary (and initial) points")
    p.add_argument("--test", type=int, default=8, help="test points")
    p.add_argument("--width", type=int, default=16)
    p.add_argument("--depth", type=int, default=2, help="hidden layers")
    args = p.parse_args()
    dde.config.set_random_seed(0)
    data, dim = {"poisson": poisson, "burgers": burgers}[args.pde](args)
    net = dde.nn.FNN([dim] + [args.width] * args.depth + [1], "tanh", "Glorot normal")
    model = dde.Model(data, net)
    if args.optimizer != "lbfgs":
        model.compile("adam", lr=1e-3)
        model.train(iterations=args.steps, display_every=1000, verbose=0)
    if args.optimizer != "adam":
        dde.optimizers.set_LBFGS_options(maxiter=args.lbfgs_iters)
        # the pytorch backend reads iterations per `LBFGS.step` from `iter_per_step`, which
        # `set_LBFGS_options` leaves at min(1000, the default maxiter): one step() would run
        # 1,000 iterations. Each step() here runs `--lbfgs-per-step` of them
        opts = dde.optimizers.config.LBFGS_options
        opts["iter_per_step"] = min(args.lbfgs_per_step, args.lbfgs_iters)
        opts["fun_per_step"] = opts["maxfun"] * opts["iter_per_step"] // opts["maxiter"]
        model.compile("L-BFGS")
        model.train(verbose=0)
    print(f"train loss {float(np.sum(model.train_state.loss_train)):.4f}")


if __name__ == "__main__":
    main()
