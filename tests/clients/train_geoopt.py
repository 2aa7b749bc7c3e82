"""Riemannian optimization with geoopt, as its README, examples and users write it:
parameters that live on a manifold (`geoopt.ManifoldParameter`, a `torch.nn.Parameter`
subclass carrying its manifold) trained by geoopt's optimizers, whose step takes the
Riemannian gradient (`egrad2rgrad`), retracts the point back onto the manifold and
transports the momentum with it (`retr_transp`), then `point.copy_(new_point)`. Seeded,
tiny, nothing downloaded.

    python tests/clients/train_geoopt.py --steps 3 --mode stiefel
    memledger trace tests/clients/train_geoopt.py --steps 2 -o st.ledger -- --mode stiefel
    memledger compare tests/clients/train_geoopt.py --steps 2 -p 'checkpoint:blocks.*' \
        -- --mode stiefel

Modes (`--mode`):

- `stiefel`: an MLP classifier whose `blocks.*` (LayerNorm, a linear layer with an
  orthogonal weight: `ManifoldParameter` on `geoopt.Stiefel()`, the canonical metric and
  its Cayley retraction through `linalg.solve` (`--euclidean`: `Stiefel(canonical=False)`,
  a QR retraction), ReLU, residual)
  sit between an ordinary `inp` and `head`; `geoopt.optim.RiemannianSGD` with momentum
  (`--opt sgd`, the default) or `RiemannianAdam` (`--opt adam`) over all parameters (the
  Euclidean ones too, as the README does).
- `poincare`: Poincare embeddings of a small tree (its transitive closure as the
  relations, `--neg` negatives per pair), a `ManifoldParameter` on `geoopt.PoincareBall()`
  indexed per batch, the loss a softmax over negative distances (`ball.dist`) as in
  Nickel & Kiela; `RiemannianAdam` (`--stabilize` to project every N steps).
- `hyperbolic`: a hyperbolic network: Euclidean features mapped onto the ball
  (`ball.expmap0`), `blocks.*` of Mobius linear layers (`ball.mobius_matvec` and a
  `ManifoldParameter` bias added by `ball.mobius_add`, as geoopt's mobius_linear example),
  then geoopt's `Distance2StereographicHyperplanes` layer and a Euclidean `head`;
  `RiemannianAdam`.
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import geoopt
from geoopt.layers.stereographic import Distance2StereographicHyperplanes


class StiefelLinear(nn.Module):
    """A linear layer whose (out, in) weight has orthonormal rows: stored (in, out) on the
    Stiefel manifold (orthonormal columns), used transposed."""

    def __init__(self, width: int, euclidean: bool) -> None:
        super().__init__()
        manifold = geoopt.Stiefel(canonical=not euclidean)
        self.weight = geoopt.ManifoldParameter(manifold.random(width, width), manifold=manifold)
        self.bias = nn.Parameter(torch.zeros(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.weight + self.bias


class StiefelBlock(nn.Module):
    def __init__(self, width: int, euclidean: bool) -> None:
        super().__init__()
        self.norm = nn.LayerNorm(width)
        self.fc = StiefelLinear(width, euclidean)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + F.relu(self.fc(self.norm(x)))


class StiefelNet(nn.Module):
    def __init__(self, features: int, width: int, depth: int, classes: int,
                 euclidean: bool) -> None:
        super().__init__()
        self.inp = nn.Linear(features, width)
        self.blocks = nn.ModuleList(StiefelBlock(width, euclidean) for _ in range(depth))
        self.head = nn.Linear(width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for block in self.blocks:
            h = block(h)
        return self.head(h)


class MobiusLinear(nn.Module):
    """geoopt's examples/mobius_linear_example.py: y = (W (x) x) (+) b on the ball."""

    def __init__(self, width: int, ball: geoopt.PoincareBall) -> None:
        super().__init__()
        self.ball = ball
        self.weight = nn.Parameter(torch.empty(width, width))
        nn.init.eye_(self.weight)
        self.weight.data.add_(torch.randn(width, width) * 1e-2)
        self.bias = geoopt.ManifoldParameter(torch.zeros(width), manifold=ball)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out = self.ball.mobius_matvec(self.weight, x)
        out = self.ball.mobius_add(out, self.bias)
        return self.ball.projx(out)


class HyperBlock(nn.Module):
    def __init__(self, width: int, ball: geoopt.PoincareBall) -> None:
        super().__init__()
        self.ball = ball
        self.lin = MobiusLinear(width, ball)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the Mobius version of a pointwise nonlinearity: log, tanh, exp at the origin
        return self.ball.expmap0(torch.tanh(self.ball.logmap0(self.lin(x))))


class HyperNet(nn.Module):
    def __init__(self, features: int, width: int, depth: int, classes: int) -> None:
        super().__init__()
        self.ball = geoopt.PoincareBall(c=1.0)
        self.inp = nn.Linear(features, width)
        self.blocks = nn.ModuleList(HyperBlock(width, self.ball) for _ in range(depth))
        self.planes = Distance2StereographicHyperplanes(width, 2 * width, ball=self.ball)
        self.head = nn.Linear(2 * width, classes)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.ball.expmap0(self.inp(x) * 0.1)
        for block in self.blocks:
            h = block(h)
        return self.head(self.planes(h))


class PoincareEmbedding(nn.Module):
    def __init__(self, nodes: int, dim: int) -> None:
        super().__init__()
        self.ball = geoopt.PoincareBall()
        self.emb = geoopt.ManifoldParameter(self.ball.random_normal(nodes, dim, std=1e-3),
                                            manifold=self.ball)

    def forward(self, pairs: torch.Tensor) -> torch.Tensor:
        """pairs: (batch, 1 + neg) node indices, the first the positive; -> distances."""
        e = self.emb[pairs]
        return self.ball.dist(e[:, :1], e[:, 1:])


def tree_closure(branching: int, levels: int) -> tuple[int, torch.Tensor]:
    """A complete tree's (ancestor, descendant) pairs: the transitive closure."""
    parent = [-1]
    frontier = [0]
    for _ in range(levels):
        nxt = []
        for p in frontier:
            for _ in range(branching):
                parent.append(p)
                nxt.append(len(parent) - 1)
        frontier = nxt
    pairs = []
    for node in range(1, len(parent)):
        a = parent[node]
        while a >= 0:
            pairs.append((a, node))
            a = parent[a]
    return len(parent), torch.tensor(pairs)


def stiefel(args) -> None:
    gen = torch.Generator().manual_seed(0)
    model = StiefelNet(args.features, args.width, args.depth, args.classes, args.euclidean)
    if args.opt == "sgd":
        optimizer = geoopt.optim.RiemannianSGD(model.parameters(), lr=1e-2, momentum=0.9,
                                               stabilize=args.stabilize)
    else:
        optimizer = geoopt.optim.RiemannianAdam(model.parameters(), lr=1e-3,
                                                stabilize=args.stabilize)
    _classify(model, optimizer, gen, args)


def _classify(model, optimizer, gen: torch.Generator, args) -> None:
    """The classifiers' loop: random features and labels, cross entropy, one step each."""
    for step in range(args.steps):
        x = torch.randn(args.batch, args.features, generator=gen)
        y = torch.randint(0, args.classes, (args.batch,), generator=gen)
        optimizer.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


def hyperbolic(args) -> None:
    gen = torch.Generator().manual_seed(0)
    model = HyperNet(args.features, args.width, args.depth, args.classes)
    optimizer = geoopt.optim.RiemannianAdam(model.parameters(), lr=1e-3,
                                            stabilize=args.stabilize)
    _classify(model, optimizer, gen, args)


def poincare(args) -> None:
    gen = torch.Generator().manual_seed(0)
    nodes, relations = tree_closure(args.branching, args.levels)
    model = PoincareEmbedding(nodes, args.width)
    optimizer = geoopt.optim.RiemannianAdam(model.parameters(), lr=args.lr,
                                            stabilize=args.stabilize)
    for step in range(args.steps):
        pick = torch.randint(0, len(relations), (args.batch,), generator=gen)
        negs = torch.randint(0, nodes, (args.batch, args.neg), generator=gen)
        pairs = torch.cat([relations[pick], negs], dim=1)    # (u, v, negatives...)
        dist = model(pairs)
        # the positive v is class 0 among (v, negatives)
        loss = F.cross_entropy(-dist, torch.zeros(args.batch, dtype=torch.long))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="stiefel", choices=["stiefel", "poincare", "hyperbolic"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--opt", default="sgd", choices=["sgd", "adam"])
    p.add_argument("--euclidean", action="store_true", help="Stiefel(canonical=False): QR")
    p.add_argument("--stabilize", type=int, default=None)
    p.add_argument("--features", type=int, default=16)
    p.add_argument("--width", type=int, default=32)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--classes", type=int, default=4)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--branching", type=int, default=3)
    p.add_argument("--levels", type=int, default=3)
    p.add_argument("--neg", type=int, default=8)
    p.add_argument("--lr", type=float, default=0.3)
    args = p.parse_args()
    torch.manual_seed(0)
    {"stiefel": stiefel, "poincare": poincare, "hyperbolic": hyperbolic}[args.mode](args)


if __name__ == "__main__":
    main()
