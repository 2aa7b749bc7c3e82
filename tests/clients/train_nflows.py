"""nflows (bayesiains/nflows) as its README trains it: a `Flow(transform, distribution)` of
nflows transforms over a `StandardNormal` base, fitted by maximum likelihood,
`loss = -flow.log_prob(inputs=x).mean()` (the flow itself is never called as a module:
`log_prob` runs `_transform(...)`, a `CompositeTransform` whose items are module calls).

Modes (each the library's own building blocks, shrunk):
  maf      the README's flow: `ReversePermutation` + `MaskedAffineAutoregressiveTransform`
           (a MADE with residual blocks) per layer; `--bn`: nflows' `BatchNorm` transform
           between layers (running statistics written in place in training), as
           `MaskedAutoregressiveFlow(batch_norm_between_layers=True)` builds it
  nsf      neural spline flow: `ActNorm` (initialised from the first batch: it assigns its
           parameters' `.data`), `PiecewiseRationalQuadraticCouplingTransform` over a
           `ResidualNet` (linear tails), `LULinear` per layer
           (`--no-actnorm` leaves ActNorm out, `--perm reverse` takes `ReversePermutation`
           for `LULinear`)
  --validate  a held-out log-likelihood under `flow.eval()` and `no_grad` after each step
           (BatchNorm's running statistics; LULinear's weight cached until `train()`)
  armqs    `MaskedPiecewiseRationalQuadraticAutoregressiveTransform` + `RandomPermutation`
  reverse  the `maf` flow fitted by reverse KL against a two-mode density:
           `flow.sample_and_log_prob(n)` runs the transforms' `inverse` (MAF's one pass per
           feature, the MADE called again for each)
  cond     a conditional MAF: `context_features` and an `embedding_net` (an `nn.Linear` the
           flow owns), `flow.log_prob(inputs=x, context=y)`

Tiny, seeded, random data (two moons drawn directly), nothing downloaded.

    python tests/clients/train_nflows.py --mode nsf --steps 3
    memledger trace tests/clients/train_nflows.py --steps 2 -o nflows.ledger -- --mode maf
    memledger predict nflows.ledger --policy 'checkpoint:_transform._transforms.*'
"""

import argparse
import math

import torch
from torch import nn

from nflows.distributions.normal import StandardNormal
from nflows.flows.base import Flow
from nflows.nn.nets import ResidualNet
from nflows.transforms.autoregressive import (
    MaskedAffineAutoregressiveTransform,
    MaskedPiecewiseRationalQuadraticAutoregressiveTransform,
)
from nflows.transforms.base import CompositeTransform
from nflows.transforms.coupling import PiecewiseRationalQuadraticCouplingTransform
from nflows.transforms.lu import LULinear
from nflows.transforms.normalization import ActNorm, BatchNorm
from nflows.transforms.permutations import RandomPermutation, ReversePermutation


def two_moons(n: int, features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Two interleaved half circles (sklearn's `make_moons`, drawn here), padded with noise
    to `features` columns; the half each point came from is its label."""
    t = torch.rand(n) * math.pi
    upper = torch.rand(n) < 0.5
    x = torch.where(upper, torch.cos(t), 1 - torch.cos(t))
    y = torch.where(upper, torch.sin(t), 0.5 - torch.sin(t))
    pts = torch.cat([torch.stack([x, y], 1), torch.randn(n, features - 2)], 1)
    return pts + 0.1 * torch.randn(n, features), upper.float()[:, None]


def maf(args):
    layers = []
    for _ in range(args.layers):
        layers.append(ReversePermutation(features=args.features))
        layers.append(MaskedAffineAutoregressiveTransform(
            features=args.features, hidden_features=args.hidden, num_blocks=2,
            context_features=args.context))
        if args.bn:
            layers.append(BatchNorm(args.features))
    return CompositeTransform(layers)


def nsf(args):
    layers = []
    for i in range(args.layers):
        mask = torch.arange(args.features) % 2 == i % 2
        if not args.no_actnorm:
            layers.append(ActNorm(args.features))
        layers.append(PiecewiseRationalQuadraticCouplingTransform(
            mask=mask,
            transform_net_create_fn=lambda i_, o_: ResidualNet(
                i_, o_, hidden_features=args.hidden, num_blocks=2),
            num_bins=4, tails="linear", tail_bound=3.0))
        layers.append(LULinear(args.features, using_cache=args.validate, identity_init=True)
                      if args.perm == "lu" else ReversePermutation(args.features))
    return CompositeTransform(layers)


def armqs(args):
    layers = []
    for _ in range(args.layers):
        layers.append(MaskedPiecewiseRationalQuadraticAutoregressiveTransform(
            features=args.features, hidden_features=args.hidden, num_bins=4,
            tails="linear", tail_bound=3.0, num_blocks=1))
        layers.append(RandomPermutation(features=args.features))
    return CompositeTransform(layers)


MODES = {"maf": maf, "nsf": nsf, "armqs": armqs, "cond": maf, "reverse": maf}


def two_modes_log_prob(z: torch.Tensor) -> torch.Tensor:
    """An unnormalised density with two modes along the first feature."""
    a = torch.logsumexp(torch.stack([-0.5 * ((z[:, 0] - 2) / 0.5) ** 2,
                                     -0.5 * ((z[:, 0] + 2) / 0.5) ** 2]), 0)
    return a - 0.5 * (z[:, 1:] ** 2).sum(1)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mode", choices=sorted(MODES), default="maf")
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--features", type=int, default=4)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--hidden", type=int, default=16)
    ap.add_argument("--no-actnorm", action="store_true", help="nsf: no ActNorm")
    ap.add_argument("--perm", choices=["lu", "reverse"], default="lu",
                    help="nsf: the layer after each coupling")
    ap.add_argument("--bn", action="store_true", help="maf: BatchNorm between layers")
    ap.add_argument("--validate", action="store_true",
                    help="a held-out log-likelihood under eval() and no_grad after each step "
                         "(nsf: LULinear caches its weight in eval mode)")
    args = ap.parse_args()
    torch.manual_seed(0)
    args.context = 4 if args.mode == "cond" else None
    transform = MODES[args.mode](args)
    embedding = nn.Linear(1, args.context) if args.context else None
    flow = Flow(transform, StandardNormal(shape=[args.features]), embedding_net=embedding)
    optimizer = torch.optim.Adam(flow.parameters(), lr=1e-3)
    for it in range(args.steps):
        x, y = two_moons(args.batch, args.features)
        optimizer.zero_grad()
        if args.mode == "reverse":
            z, log_q = flow.sample_and_log_prob(args.batch)
            loss = (log_q - two_modes_log_prob(z)).mean()
        elif args.context:
            loss = -flow.log_prob(inputs=x, context=y).mean()
        else:
            loss = -flow.log_prob(inputs=x).mean()
        loss.backward()
        optimizer.step()
        if args.validate:   # eval mode: BatchNorm's running statistics, LULinear's cache
            flow.eval()
            with torch.no_grad():
                xv, yv = two_moons(args.batch, args.features)
                val = -flow.log_prob(inputs=xv, context=yv if args.context else None).mean()
            flow.train()    # invalidates LULinear's cache
            print(f"step {it} validation {val.item():.4f}")
        print(f"step {it} loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
