"""flow_matching (Meta's flow matching library) as its examples train, tiny and seeded,
nothing downloaded: a velocity model regressed on an affine probability path's target
velocity, a discrete flow on tokens, and an evaluation that samples with the library's
solvers inside the training loop (under no_grad).

    python tests/clients/train_flow_matching.py --steps 3
    memledger trace tests/clients/train_flow_matching.py --steps 2 -o fm.ledger -- --model tf
    memledger compare tests/clients/train_flow_matching.py -p 'checkpoint:@Block' -- --model tf

Modes (`--mode`):

- `cont` (the default; examples/2d_flow_matching.ipynb): x_1 from a 2-D checkerboard, x_0
  Gaussian noise, `AffineProbPath(scheduler=CondOTScheduler())` (`--scheduler cosine`:
  `CosineScheduler`, `vp`: `VPScheduler`, `poly`: `PolynomialConvexScheduler(2)`),
  `path.sample(t=..., x_0=..., x_1=...)`, the MSE of the model's output on `dx_t`. The
  model (`--model`): `mlp` (the notebook's MLP over `[x, t]`, Swish activations) or `tf`
  (a tiny transformer over a sequence of `--seq` points, each a token, the time added as
  an embedding). `--eval-every K`: every K steps, `ODESolver(velocity_model=...)
  .sample(...)` (`--method midpoint`, step 0.25) under `torch.no_grad()` and the mean of
  the samples; `--likelihood` also `compute_likelihood` (exact divergence, grad enabled
  inside the solver as the library runs it) under no_grad.
- `discrete` (examples/2d_discrete_flow_matching.ipynb): tokens of a vocabulary of 16
  (+1 mask token with `--source mask`, else uniform source), `MixtureDiscreteProbPath(
  PolynomialConvexScheduler(n=2))`, the model's logits (B, d, V) under
  `MixturePathGeneralizedKL(path)`; `--eval-every K` samples with
  `MixtureDiscreteEulerSolver` (step 0.25).

All: `--accum N`, `--clip`, `--amp` (bf16 autocast on the loss's forward). `--bug
grad-eval`: the evaluation without `no_grad` (the sampler's forwards build graphs no
backward reads); `--bug no-zero-grad`: the gradients never cleared.
"""

import argparse
import math

import torch
import torch.nn as nn

from flow_matching.loss import MixturePathGeneralizedKL
from flow_matching.path import AffineProbPath, MixtureDiscreteProbPath
from flow_matching.path.scheduler import (CondOTScheduler, CosineScheduler,
                                          PolynomialConvexScheduler, VPScheduler)
from flow_matching.solver import MixtureDiscreteEulerSolver, ODESolver
from flow_matching.utils import ModelWrapper


class Swish(nn.Module):
    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.sigmoid(x) * x


class MLP(nn.Module):
    """The notebook's velocity MLP: [x, t] in, a velocity out."""

    def __init__(self, input_dim: int = 2, time_dim: int = 1, hidden: int = 32):
        super().__init__()
        self.input_dim, self.time_dim = input_dim, time_dim
        self.main = nn.Sequential(
            nn.Linear(input_dim + time_dim, hidden), Swish(),
            nn.Linear(hidden, hidden), Swish(),
            nn.Linear(hidden, hidden), Swish(),
            nn.Linear(hidden, input_dim))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        sz = x.size()
        x = x.reshape(-1, self.input_dim)
        t = t.reshape(-1, self.time_dim).float()
        t = t.reshape(-1, 1).expand(x.shape[0], 1)
        return self.main(torch.cat([x, t], dim=1)).reshape(*sz)


class Block(nn.Module):
    def __init__(self, dim: int, heads: int = 2):
        super().__init__()
        self.norm1 = nn.LayerNorm(dim)
        self.attn = nn.MultiheadAttention(dim, heads, batch_first=True)
        self.norm2 = nn.LayerNorm(dim)
        self.ff = nn.Sequential(nn.Linear(dim, 2 * dim), nn.GELU(), nn.Linear(2 * dim, dim))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        a = self.norm1(h)
        h = h + self.attn(a, a, a, need_weights=False)[0]
        return h + self.ff(self.norm2(h))


class TimeEmbedding(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim
        self.proj = nn.Linear(dim, dim)

    def forward(self, t: torch.Tensor) -> torch.Tensor:
        half = self.dim // 2
        freqs = torch.exp(-math.log(1000.0) * torch.arange(half, device=t.device) / half)
        ang = t.float()[:, None] * freqs[None] * 1000.0
        return self.proj(torch.cat([ang.sin(), ang.cos()], dim=-1))


class Transformer(nn.Module):
    """A tiny transformer velocity (or posterior) model over a sequence of points or
    tokens."""

    def __init__(self, in_dim: int, out_dim: int, dim: int = 16, depth: int = 2,
                 vocab: int | None = None):
        super().__init__()
        self.inp = nn.Embedding(vocab, dim) if vocab else nn.Linear(in_dim, dim)
        self.time = TimeEmbedding(dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.out = nn.Linear(dim, out_dim)

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0:
            t = t.expand(x.shape[0])
        h = self.inp(x) + self.time(t)[:, None]  # (B, n, dim)
        for blk in self.blocks:
            h = blk(h)
        return self.out(h)


class DiscreteMLP(nn.Module):
    """The discrete notebook's model: token embeddings and the time, logits per token."""

    def __init__(self, vocab: int, length: int, hidden: int = 32, emb: int = 8):
        super().__init__()
        self.vocab, self.length = vocab, length
        self.embed = nn.Embedding(vocab, emb)
        self.main = nn.Sequential(
            nn.Linear(length * emb + 1, hidden), Swish(),
            nn.Linear(hidden, hidden), Swish(),
            nn.Linear(hidden, length * vocab))

    def forward(self, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        if t.dim() == 0:
            t = t.expand(x.shape[0])
        h = self.embed(x).flatten(1)
        h = torch.cat([h, t[:, None].float()], dim=-1)
        return self.main(h).reshape(x.shape[0], self.length, self.vocab)


class WrappedModel(ModelWrapper):
    """What the solver calls: the velocity, or softmax'd posterior for the discrete one."""

    def __init__(self, model: nn.Module, probs: bool = False):
        super().__init__(model)
        self.probs = probs

    def forward(self, x: torch.Tensor, t: torch.Tensor, **extras) -> torch.Tensor:
        out = self.model(x, t)
        return torch.softmax(out.float(), dim=-1) if self.probs else out


def checkerboard(batch: int, n: int) -> torch.Tensor:
    x1 = torch.rand(batch, n) * 4 - 2
    x2_ = torch.rand(batch, n) - torch.randint(high=2, size=(batch, n)) * 2
    x2 = x2_ + (torch.floor(x1) % 2)
    return torch.stack([x1, x2], dim=-1) * 2  # (B, n, 2)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--mode", default="cont", choices=["cont", "discrete"])
    p.add_argument("--model", default="mlp", choices=["mlp", "tf"])
    p.add_argument("--scheduler", default="condot", choices=["condot", "cosine", "vp", "poly"])
    p.add_argument("--source", default="uniform", choices=["uniform", "mask"])
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seq", type=int, default=8)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--eval-every", type=int, default=0)
    p.add_argument("--method", default="midpoint")
    p.add_argument("--likelihood", action="store_true")
    p.add_argument("--accum", type=int, default=1)
    p.add_argument("--clip", action="store_true")
    p.add_argument("--amp", action="store_true")
    p.add_argument("--bug", default="none", choices=["none", "grad-eval", "no-zero-grad"])
    args = p.parse_args()
    torch.manual_seed(0)

    vocab = 16
    if args.mode == "cont":
        sched = {"condot": CondOTScheduler, "cosine": CosineScheduler, "vp": VPScheduler,
                 "poly": lambda: PolynomialConvexScheduler(n=2)}[args.scheduler]()
        path = AffineProbPath(scheduler=sched)
        n = 1 if args.model == "mlp" else args.seq
        if args.model == "mlp":
            model = MLP(hidden=args.dim * 2)
        else:
            model = Transformer(2, 2, dim=args.dim, depth=args.depth)
        wrapped = WrappedModel(model)
    else:
        mask = vocab if args.source == "mask" else None
        vin = vocab + (1 if mask is not None else 0)
        path = MixtureDiscreteProbPath(scheduler=PolynomialConvexScheduler(n=2.0))
        loss_fn = MixturePathGeneralizedKL(path=path)
        n = args.seq
        if args.model == "mlp":
            model = DiscreteMLP(vin, n, hidden=args.dim * 2)
        else:
            model = Transformer(0, vin, dim=args.dim, depth=args.depth, vocab=vin)
        wrapped = WrappedModel(model, probs=True)
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)

    def loss_of() -> torch.Tensor:
        t = torch.rand(args.batch)
        if args.mode == "cont":
            x_1 = checkerboard(args.batch, n)
            if args.model == "mlp":
                x_1 = x_1[:, 0]
            x_0 = torch.randn_like(x_1)
            ps = path.sample(t=t, x_0=x_0, x_1=x_1)
            return torch.pow(model(ps.x_t, ps.t) - ps.dx_t, 2).mean()
        x_1 = torch.randint(0, vocab, (args.batch, n))
        x_0 = (torch.full_like(x_1, mask) if mask is not None
               else torch.randint_like(x_1, 0, vocab))
        t = t * (1 - 1e-3)  # the notebook's epsilon: the loss divides by 1 - kappa_t
        ps = path.sample(t=t, x_0=x_0, x_1=x_1)
        return loss_fn(model(ps.x_t, ps.t), ps.x_1, ps.x_t, ps.t)

    for step in range(args.steps):
        for _ in range(args.accum):
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=args.amp):
                loss = loss_of() / args.accum
            loss.backward()
        if args.clip:
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optim.step()
        if args.bug != "no-zero-grad":
            optim.zero_grad()
        if args.eval_every and (step + 1) % args.eval_every == 0:
            model.eval()
            with torch.set_grad_enabled(args.bug == "grad-eval"):
                if args.mode == "cont":
                    shape = (args.batch, 2) if args.model == "mlp" else (args.batch, n, 2)
                    solver = ODESolver(velocity_model=wrapped)
                    x_init = torch.randn(shape)
                    grid = torch.linspace(0, 1, 5)
                    sol = solver.sample(x_init=x_init, time_grid=grid, step_size=0.25,
                                        method=args.method, return_intermediates=False)
                    print(f"step {step}: sample mean {sol.mean().item():.4f}")
                    if args.likelihood:
                        x1 = checkerboard(args.batch, n)
                        x1 = x1[:, 0] if args.model == "mlp" else x1
                        grid = torch.tensor([1.0, 0.0])

                        def log_p0(x: torch.Tensor) -> torch.Tensor:
                            dims = tuple(range(1, x.dim()))
                            return (-0.5 * x.pow(2) - 0.5 * math.log(2 * math.pi)).sum(dims)

                        _, ll = solver.compute_likelihood(
                            x_1=x1, log_p0=log_p0, step_size=0.25, method=args.method,
                            time_grid=grid, exact_divergence=args.model == "mlp")
                        print(f"step {step}: log-likelihood {ll.mean().item():.4f}")
                else:
                    solver = MixtureDiscreteEulerSolver(model=wrapped, path=path,
                                                        vocabulary_size=vin)
                    x_init = (torch.full((args.batch, n), mask) if mask is not None
                              else torch.randint(0, vocab, (args.batch, n)))
                    sol = solver.sample(x_init=x_init, step_size=0.25)
                    print(f"step {step}: distinct tokens {sol.unique().numel()}")
            model.train()
        print(f"step {step}: loss {loss.item() * args.accum:.4f}")


if __name__ == "__main__":
    main()
