"""Pyro (pyro-ppl) stochastic variational inference: `SVI(model, guide, pyro.optim.Adam,
Trace_ELBO)` and `svi.step(x, y)`. The script never calls `optimizer.step()`: pyro's optim
wrapper keeps one `torch.optim.Adam` per parameter (made the first time the parameter is
seen) and steps each of them inside `svi.step`; the parameters live in pyro's param store,
not in one `nn.Module`. Tiny shapes, seeded, nothing downloaded.

    python tests/clients/train_pyro.py --case bnn --steps 3
    memledger trace tests/clients/train_pyro.py --steps 2 -o pyro.ledger -- --case bnn

`--case`:
  bnn      a Bayesian MLP as a `PyroModule` (`PyroSample` weights with Normal priors),
           an `AutoNormal` guide (its loc/scale parameters are the ones trained)
  det      a plain `nn.Module` MLP registered with `pyro.module("net", net)` (a MAP-style
           regression: the network's weights are pyro params), a learned noise scale
           (`pyro.param` with a positive constraint), no guide latents (`AutoDelta` of the
           noise's latent)
  hybrid   a `PyroModule` encoder whose first layer is deterministic (an `nn.Linear` in
           `layers.0`) and whose head is Bayesian (`PyroSample`), `AutoNormal` guide,
           `TraceMeanField_ELBO` (analytic KL)

`--order`: set (as pyro steps them: `SVI.step` hands its optimizer a Python set of the
parameters, iterated in the order of their addresses, so another order in another
process), or names / reversed (pyro's `PyroOptim.__call__` handed the parameters sorted by
their param-store names, or the reverse: the same steps in a fixed order).

Modules are `layers.0`, `layers.1`, ... (`checkpoint:layers.*`).
"""

import argparse

import torch
from torch import nn

IN, HID, N = 8, 32, 64


def make_data(gen):
    x = torch.randn(N, IN, generator=gen)
    w = torch.randn(IN, 1, generator=gen)
    y = (x @ w).squeeze(-1).tanh() + 0.1 * torch.randn(N, generator=gen)
    return x, y


def build(case):
    import pyro
    import pyro.distributions as dist
    from pyro.infer.autoguide import AutoDelta, AutoNormal
    from pyro.nn import PyroModule, PyroSample

    if case == "det":
        class Net(nn.Module):
            def __init__(self):
                super().__init__()
                self.layers = nn.ModuleList([nn.Sequential(nn.Linear(IN, HID), nn.GELU()),
                                             nn.Sequential(nn.Linear(HID, HID), nn.GELU()),
                                             nn.Linear(HID, 1)])

            def forward(self, x):
                for layer in self.layers:
                    x = layer(x)
                return x.squeeze(-1)

        net = Net()

        def model(x, y):
            pyro.module("net", net)
            mean = net(x)
            sigma = pyro.sample("sigma", dist.LogNormal(0.0, 1.0))
            with pyro.plate("data", x.shape[0]):
                pyro.sample("obs", dist.Normal(mean, sigma), obs=y)

        return net, model, AutoDelta(model)

    class Bayes(PyroModule):
        def __init__(self, first_bayesian):
            super().__init__()
            first = PyroModule[nn.Linear](IN, HID)
            if first_bayesian:
                first.weight = PyroSample(dist.Normal(0.0, 1.0).expand([HID, IN]).to_event(2))
                first.bias = PyroSample(dist.Normal(0.0, 1.0).expand([HID]).to_event(1))
            mid = PyroModule[nn.Linear](HID, HID)
            mid.weight = PyroSample(dist.Normal(0.0, 0.5).expand([HID, HID]).to_event(2))
            mid.bias = PyroSample(dist.Normal(0.0, 0.5).expand([HID]).to_event(1))
            head = PyroModule[nn.Linear](HID, 1)
            head.weight = PyroSample(dist.Normal(0.0, 0.5).expand([1, HID]).to_event(2))
            head.bias = PyroSample(dist.Normal(0.0, 0.5).expand([1]).to_event(1))
            self.layers = PyroModule[nn.ModuleList]([first, mid, head])

        def forward(self, x, y=None):
            h = self.layers[0](x).tanh()
            h = self.layers[1](h).tanh()
            mean = self.layers[2](h).squeeze(-1)
            with pyro.plate("data", x.shape[0]):
                pyro.sample("obs", dist.Normal(mean, 0.1), obs=y)
            return mean

    net = Bayes(first_bayesian=(case == "bnn"))
    return net, net, AutoNormal(net, init_scale=0.05)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="bnn")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--order", default="set", choices=["set", "names", "reversed"])
    args = p.parse_args()
    import pyro
    import pyro.optim.optim

    if args.order != "set":
        call = pyro.optim.optim.PyroOptim.__call__

        def ordered(self, params, *a, **kw):
            store = pyro.get_param_store()
            params = sorted(params, key=store.param_name, reverse=args.order == "reversed")
            return call(self, params, *a, **kw)
        pyro.optim.optim.PyroOptim.__call__ = ordered
    from pyro.infer import SVI, Trace_ELBO, TraceMeanField_ELBO

    pyro.set_rng_seed(0)
    pyro.clear_param_store()
    net, model, guide = build(args.case)
    gen = torch.Generator().manual_seed(1)
    x, y = make_data(gen)
    elbo = TraceMeanField_ELBO() if args.case == "hybrid" else Trace_ELBO()
    svi = SVI(model, guide, pyro.optim.Adam({"lr": 1e-2}), loss=elbo)
    for step in range(args.steps):
        loss = svi.step(x, y)
        print(f"step {step}  loss {loss:.4f}")


if __name__ == "__main__":
    main()
