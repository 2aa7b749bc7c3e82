"""Normalizing flows trained with zuko, as its README writes them: `flow(c)` builds a
conditional distribution (its transforms are lazy: `MaskedAutoregressiveTransform.forward(c)`
returns a torch `Transform` whose hyper-network runs later, inside `log_prob`), and the loss
is `-flow(c).log_prob(x).mean()`, Adam. Data: 3 features drawn from a context-dependent
Gaussian mixture, 5 context features, seeded. Tiny, nothing downloaded.

    python tests/clients/train_zuko.py --steps 3 --mode nsf
    memledger trace tests/clients/train_zuko.py --steps 2 -o zuko.ledger -- --mode maf

Modes (`--mode`):

- `nsf`: a conditional neural spline flow (`zuko.flows.NSF`, 2 transforms): monotonic
  rational-quadratic splines whose knots a masked MLP (`transform.transforms.*.hyper`)
  computes.
- `maf`: a masked autoregressive flow (`zuko.flows.MAF`, affine, 3 transforms).
- `nice`: a coupling flow (`zuko.flows.NICE`): half the features pass unchanged, the other
  half is shifted by an MLP of the first.
- `reverse`: variational inference with an unconditional NSF: `flow().rsample()` and the
  reverse KL to an unnormalised target, through the inverse transforms.
- `cnf`: a continuous normalizing flow (`zuko.flows.CNF`): an ODE whose log-density takes
  the trace of the Jacobian (`torch.autograd.grad` with `create_graph`: exact for 3
  features), integrated by zuko's own Dormand-Prince solver.
"""

import argparse

import torch

import zuko

FEATURES, CONTEXT, BATCH = 3, 5, 64


def batch(gen: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    c = torch.randn(BATCH, CONTEXT, generator=gen)
    centre = torch.stack([c[:, 0], c[:, 1] - c[:, 2], c[:, 3] * 0.5], dim=1)
    pick = (torch.rand(BATCH, 1, generator=gen) < 0.5).float() * 2 - 1
    x = centre + pick + 0.3 * torch.randn(BATCH, FEATURES, generator=gen)
    return x, c


def target_log_prob(z: torch.Tensor) -> torch.Tensor:
    """An unnormalised banana-shaped density for `reverse`."""
    return -0.5 * (z[:, 0] ** 2 + (z[:, 1] - z[:, 0] ** 2) ** 2 / 0.25 + z[:, 2] ** 2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="nsf", choices=["nsf", "maf", "nice", "reverse", "cnf"])
    p.add_argument("--steps", type=int, default=3)
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)

    if args.mode == "nsf":
        flow = zuko.flows.NSF(FEATURES, CONTEXT, transforms=2, hidden_features=[32, 32])
    elif args.mode == "maf":
        flow = zuko.flows.MAF(FEATURES, CONTEXT, transforms=3, hidden_features=[32, 32])
    elif args.mode == "nice":
        flow = zuko.flows.NICE(FEATURES, CONTEXT, transforms=3, hidden_features=[32, 32])
    elif args.mode == "reverse":
        flow = zuko.flows.NSF(FEATURES, transforms=2, hidden_features=[32, 32])
    else:
        # tolerances a quick fit takes (the defaults, 1e-6 / 1e-5, take ~4x the steps)
        flow = zuko.flows.CNF(FEATURES, CONTEXT, hidden_features=[32, 32], atol=1e-4,
                              rtol=1e-3)
    opt = torch.optim.Adam(flow.parameters(), lr=1e-3)

    for step in range(args.steps):
        if args.mode == "reverse":
            z, log_q = flow().rsample_and_log_prob((BATCH,))
            loss = (log_q - target_log_prob(z)).mean()
        else:
            x, c = batch(gen)
            loss = -flow(c).log_prob(x).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
