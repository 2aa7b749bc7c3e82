"""A deep equilibrium model (torchdeq) as its docs write one: an injection of the input, an
`f` whose fixed point z* = f(z*, x) a solver finds under no_grad (`get_deq`: fixed-point
iteration, Anderson or Broyden), the gradient re-attached by implicit differentiation
(`--grad ift`: an autograd Function whose backward runs f once more and solves a second
fixed point; `--grad hook`: a hook on f(z*) that solves it) or by phantom gradients
(`--grad N`: N damped steps of f with grad), weight or spectral normalisation on f's
layers (`apply_norm`; `reset_norm` recomputes the weights from their `_v`/`_g` at each
forward), and optionally the Jacobian regularisation (`jac_reg`: a Hutchinson estimate of
|J|_F^2 by `autograd.grad(..., create_graph=True)` in the forward). Seeded, tiny, nothing
downloaded.

    python tests/clients/train_torchdeq.py --steps 3 --solver anderson --grad ift
    memledger trace tests/clients/train_torchdeq.py --steps 2 -o deq.ledger -- --grad 2
    memledger compare tests/clients/train_torchdeq.py -p 'checkpoint:f.*' -- --jac-reg

`--f mlp` (Linear, GroupNorm, ReLU, a Linear back, a residual: the DEQ-MLP of its
tutorial) or `--f conv` (two Conv2d with GroupNorm: its MDEQ-style cell); `--core
indexing|sliced`, `--n-states K` (K states sampled along the solver, each with its own
gradient), `--norm weight_norm|spectral_norm|none`, `--iters` (the solver's max_iter),
`--eval` (a no_grad evaluation each step).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

from torchdeq import get_deq
from torchdeq.loss import jac_reg
from torchdeq.norm import apply_norm, reset_norm


class MLPCell(nn.Module):
    def __init__(self, d: int, hidden: int) -> None:
        super().__init__()
        self.fc1 = nn.Linear(d, hidden)
        self.gn = nn.GroupNorm(4, hidden)
        self.fc2 = nn.Linear(hidden, d)
        self.out_gn = nn.GroupNorm(4, d)

    def forward(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.gn(self.fc1(z)))
        return self.out_gn(F.relu(z + self.fc2(y) + u))


class ConvCell(nn.Module):
    def __init__(self, c: int, hidden: int) -> None:
        super().__init__()
        self.conv1 = nn.Conv2d(c, hidden, 3, padding=1, bias=False)
        self.gn1 = nn.GroupNorm(4, hidden)
        self.conv2 = nn.Conv2d(hidden, c, 3, padding=1, bias=False)
        self.gn2 = nn.GroupNorm(4, c)

    def forward(self, z: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        y = F.relu(self.gn1(self.conv1(z)))
        return self.gn2(F.relu(z + self.conv2(y) + u))


class DEQNet(nn.Module):
    def __init__(self, args) -> None:
        super().__init__()
        d = args.dim
        self.kind = args.f
        if args.f == "mlp":
            self.inj = nn.Linear(16, d)
            self.f = MLPCell(d, 2 * d)
            self.head = nn.Linear(d, 10)
        else:
            self.inj = nn.Conv2d(3, d, 3, padding=1)
            self.f = ConvCell(d, 2 * d)
            self.head = nn.Linear(d, 10)
        grad = args.grad
        deq_kw = dict(core=args.core, f_solver=args.solver, b_solver=args.solver,
                      f_max_iter=args.iters, b_max_iter=args.iters, n_states=args.n_states,
                      f_tol=1e-6, b_tol=1e-8)
        if grad == "ift":
            deq_kw["ift"] = True
        elif grad == "hook":
            deq_kw["hook_ift"] = True
        else:
            deq_kw["grad"] = int(grad)
        self.deq = get_deq(**deq_kw)
        if args.norm != "none":
            apply_norm(self.f, args.norm)
        self.jac = args.jac_reg

    def forward(self, x: torch.Tensor):
        reset_norm(self.f)
        u = self.inj(x)
        z0 = torch.zeros_like(u)
        z_out, info = self.deq(lambda z: self.f(z, u), z0)
        jac_loss = torch.zeros(())
        if self.jac and self.training:
            # as its DEQ-MLP tutorial: one more f with grad at the fixed point
            z_star = z_out[-1].detach().requires_grad_()
            jac_loss = jac_reg(self.f(z_star, u), z_star)
        pooled = [z if self.kind == "mlp" else z.mean((2, 3)) for z in z_out]
        return [self.head(z) for z in pooled], jac_loss


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--f", default="mlp", choices=["mlp", "conv"])
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--solver", default="fixed_point_iter",
                   choices=["fixed_point_iter", "anderson", "broyden",
                            "simple_fixed_point_iter"])
    p.add_argument("--grad", default="ift", help="ift, hook, or an int (phantom steps)")
    p.add_argument("--core", default="indexing", choices=["indexing", "sliced"])
    p.add_argument("--n-states", type=int, default=1)
    p.add_argument("--iters", type=int, default=8)
    p.add_argument("--norm", default="weight_norm",
                   choices=["weight_norm", "spectral_norm", "none"])
    p.add_argument("--jac-reg", action="store_true")
    p.add_argument("--eval", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)

    model = DEQNet(args)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)

    def batch():
        x = torch.randn(args.batch, 16) if args.f == "mlp" else torch.randn(args.batch, 3, 6, 6)
        return x, torch.randint(0, 10, (args.batch,))

    for step in range(args.steps):
        model.train()
        x, y = batch()
        logits, jac_loss = model(x)
        loss = sum(F.cross_entropy(lg, y) for lg in logits) / len(logits)
        if args.jac_reg:
            loss = loss + 0.5 * jac_loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")
        if args.eval:
            model.eval()
            with torch.no_grad():
                logits, _ = model(batch()[0])
                print(f"eval acc {(logits[-1].argmax(-1) == y).float().mean().item():.3f}")


if __name__ == "__main__":
    main()
