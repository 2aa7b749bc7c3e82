"""Meta-learning and plain training with torchopt, as its README and tutorials write them:
few-shot sine regression (each task a sine of its own amplitude and phase, support and
query points drawn per task), an MLP of `blocks.*` (Linear + Tanh) and a `head`. Seeded,
tiny, nothing downloaded.

    python tests/clients/train_torchopt.py --steps 3 --mode maml
    memledger trace tests/clients/train_torchopt.py --steps 2 -o maml.ledger -- --mode maml
    memledger compare tests/clients/train_torchopt.py --steps 2 -p 'checkpoint:blocks.*' \
        -- --mode maml

Modes (`--mode`):

- `maml`: MAML as torchopt's omniglot example writes it: `torchopt.MetaSGD(net)` takes
  `--inner` differentiable steps on each task's support set (`inner_opt.step(loss)`: the
  gradients by `autograd.grad(create_graph=True)`, the new weights put in the modules'
  `_parameters` as non-leaf tensors), the query loss's `backward()` per task, then
  `torchopt.recover_state_dict` puts the meta-weights (and the inner optimizer's state)
  back; one `torch.optim.Adam` step on the meta-weights per meta-batch of `--tasks` tasks.
- `maml-adam`: the same with `torchopt.MetaAdam` inside (its moments are differentiable
  too: `moment_requires_grad=True`, the default).
- `functional`: torchopt's functional API: `torchopt.adam()`, `init` / `update`, and
  `torchopt.apply_updates` (in place) on a dict of the model's parameters, the loss through
  `torch.func.functional_call`, the gradients by `torch.autograd.grad`. No torch optimizer:
  trace it with `--steps-by forward`.
- `adam`: `torchopt.Adam(net.parameters())` as a drop-in optimizer: `zero_grad()`,
  `loss.backward()`, `step()` (torchopt's `Optimizer` is no `torch.optim.Optimizer`).
- `imaml`: implicit MAML (`torchopt.nn.ImplicitMetaGradientModule` with a conjugate-gradient
  `linear_solve`): each task clones the meta-network, solves the inner problem with
  `torchopt.SGD` and `loss.backward(inputs=params)`, and the query loss's gradient reaches
  the meta-weights through the implicit function theorem; `torch.optim.Adam` outside.
"""

import argparse
import math

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchopt

WIDTH, DEPTH, SHOTS = 64, 3, 16


class Block(nn.Module):
    def __init__(self, width: int) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.inp = nn.Linear(1, WIDTH)
        self.blocks = nn.ModuleList(Block(WIDTH) for _ in range(DEPTH))
        self.head = nn.Linear(WIDTH, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.relu(self.inp(x))
        for block in self.blocks:
            h = block(h)
        return self.head(h)


def task(gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """Support and query points of one sine: amplitude in [0.1, 5], phase in [0, pi]."""
    amp = 0.1 + 4.9 * torch.rand(1, generator=gen)
    phase = math.pi * torch.rand(1, generator=gen)
    xs = (torch.rand(2 * SHOTS, 1, generator=gen) - 0.5) * 10
    ys = amp * torch.sin(xs - phase)
    return xs[:SHOTS], ys[:SHOTS], xs[SHOTS:], ys[SHOTS:]


def maml(args, net: Net, gen: torch.Generator) -> None:
    meta_opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    if args.mode == "maml":
        inner_opt = torchopt.MetaSGD(net, lr=0.01)
    else:
        # eps_root keeps sqrt(nu) differentiable where a gradient is 0 (else NaN meta-gradients)
        inner_opt = torchopt.MetaAdam(net, lr=0.01, eps_root=1e-8)
    for step in range(args.steps):
        net_state = torchopt.extract_state_dict(net)
        optim_state = torchopt.extract_state_dict(inner_opt)
        meta_opt.zero_grad()
        total = 0.0
        for _ in range(args.tasks):
            xs, ys, xq, yq = task(gen)
            for _ in range(args.inner):
                inner_opt.step(F.mse_loss(net(xs), ys))
            qry_loss = F.mse_loss(net(xq), yq) / args.tasks
            qry_loss.backward()
            total += qry_loss.item()
            torchopt.recover_state_dict(net, net_state)
            torchopt.recover_state_dict(inner_opt, optim_state)
        meta_opt.step()
        print(f"step {step}  query loss {total:.4f}")


def functional(args, net: Net, gen: torch.Generator) -> None:
    params = dict(net.named_parameters())
    optimizer = torchopt.adam(lr=1e-3)
    opt_state = optimizer.init(params)
    for step in range(args.steps):
        xs, ys, _, _ = task(gen)
        loss = F.mse_loss(torch.func.functional_call(net, params, (xs,)), ys)
        grads = dict(zip(params, torch.autograd.grad(loss, tuple(params.values()))))
        updates, opt_state = optimizer.update(grads, opt_state, params=params)
        params = torchopt.apply_updates(params, updates)
        print(f"step {step}  loss {loss.item():.4f}")


def adam(args, net: Net, gen: torch.Generator) -> None:
    optimizer = torchopt.Adam(net.parameters(), lr=1e-3)
    for step in range(args.steps):
        xs, ys, _, _ = task(gen)
        loss = F.mse_loss(net(xs), ys)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print(f"step {step}  loss {loss.item():.4f}")


class InnerNet(torchopt.nn.ImplicitMetaGradientModule,
               linear_solve=torchopt.linear_solve.solve_normal_cg(maxiter=5, atol=0)):
    """iMAML's inner problem: the task loss plus a proximal term to the meta-weights."""

    def __init__(self, meta_net: Net, n_inner: int, reg: float) -> None:
        super().__init__()
        self.meta_net = meta_net
        self.net = torchopt.module_clone(meta_net, by="deepcopy", detach_buffers=True)
        self.n_inner = n_inner
        self.reg = reg

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)

    def objective(self, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
        loss = F.mse_loss(self(x), y)
        prox = sum(torch.sum(torch.square(p - m))
                   for p, m in zip(self.parameters(), self.meta_parameters()))
        return loss + 0.5 * self.reg * prox

    def solve(self, x: torch.Tensor, y: torch.Tensor):
        params = tuple(self.parameters())
        inner_opt = torchopt.SGD(params, lr=0.01)
        with torch.enable_grad():
            for _ in range(self.n_inner):
                loss = self.objective(x, y)
                inner_opt.zero_grad()
                loss.backward(inputs=params)
                inner_opt.step()
        return self


def imaml(args, net: Net, gen: torch.Generator) -> None:
    meta_opt = torch.optim.Adam(net.parameters(), lr=1e-3)
    for step in range(args.steps):
        meta_opt.zero_grad()
        total = 0.0
        for _ in range(args.tasks):
            xs, ys, xq, yq = task(gen)
            inner_net = InnerNet(net, args.inner, reg=2.0)
            optimal = inner_net.solve(xs, ys)
            qry_loss = F.mse_loss(optimal(xq), yq) / args.tasks
            qry_loss.backward()
            total += qry_loss.item()
        meta_opt.step()
        print(f"step {step}  query loss {total:.4f}")


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--mode", default="maml",
                   choices=["maml", "maml-adam", "functional", "adam", "imaml"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tasks", type=int, default=2, help="tasks per meta-batch")
    p.add_argument("--inner", type=int, default=2, help="inner steps per task")
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(0)
    net = Net()
    run = {"maml": maml, "maml-adam": maml, "functional": functional, "adam": adam,
           "imaml": imaml}[args.mode]
    run(args, net, gen)


if __name__ == "__main__":
    main()
