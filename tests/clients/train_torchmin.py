"""pytorch-minimize (`torchmin`) as its README trains a network: `torchmin.Minimizer` as a
torch optimizer whose `step(closure)` runs a whole minimization (the closure returns the
loss and calls no backward: the optimizer runs it, with `create_graph=True` for the methods
that take Hessian-vector products, which it gets by a second backward through the
gradient's graph), or `torchmin.minimize` on a model's flattened parameters (a function of
one flat tensor, the model called through `torch.func.functional_call`). Seeded, tiny,
nothing downloaded.

    python tests/clients/train_torchmin.py --steps 3 --method newton-cg
    memledger trace tests/clients/train_torchmin.py --steps 2 -o tm.ledger -- --method bfgs
    memledger trace tests/clients/train_torchmin.py --steps-by whole -o tm.ledger -- --flat

`--method`: `bfgs`, `l-bfgs`, `cg`, `newton-cg`, `trust-ncg` (Hessian-vector products),
`newton-exact` (the full Hessian, one product per parameter: keep the net tiny).
`--max-iter N` (the minimizer's iterations in one `step`). `--flat`: `torchmin.minimize`
on the flat parameters, `--steps` minimizations, no torch optimizer (trace it with
`--steps-by whole` or `forward`).
"""

import argparse

import torch
import torch.nn as nn
import torch.nn.functional as F

import torchmin


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + torch.tanh(self.fc(x))


class Net(nn.Module):
    def __init__(self, dim_in: int, dim: int, depth: int) -> None:
        super().__init__()
        self.embed = nn.Linear(dim_in, dim)
        self.blocks = nn.ModuleList(Block(dim) for _ in range(depth))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.embed(x))
        for block in self.blocks:
            h = block(h)
        return self.head(h).squeeze(-1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--method", default="bfgs",
                   choices=["bfgs", "l-bfgs", "cg", "newton-cg", "trust-ncg", "newton-exact"])
    p.add_argument("--max-iter", type=int, default=3)
    p.add_argument("--flat", action="store_true")
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--batch", type=int, default=32)
    args = p.parse_args()
    torch.manual_seed(0)

    model = Net(4, args.dim, args.depth)
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(args.batch, 4, generator=gen)
    y = torch.sin(x.sum(-1))

    if args.flat:
        names = [n for n, _ in model.named_parameters()]
        shapes = [q.shape for _, q in model.named_parameters()]
        sizes = [q.numel() for _, q in model.named_parameters()]

        def loss_of(flat: torch.Tensor) -> torch.Tensor:
            params = {n: t.view(s) for n, t, s in zip(names, flat.split(sizes), shapes)}
            return F.mse_loss(torch.func.functional_call(model, params, (x,)), y)

        flat = torch.cat([q.detach().reshape(-1) for q in model.parameters()])
        for step in range(args.steps):
            res = torchmin.minimize(loss_of, flat, method=args.method,
                                    max_iter=args.max_iter)
            flat = res.x
            print(f"step {step} loss {float(res.fun):.5f} nfev {res.nfev}")
        return

    optimizer = torchmin.Minimizer(model.parameters(), method=args.method,
                                   max_iter=args.max_iter)

    def closure() -> torch.Tensor:
        optimizer.zero_grad()
        return F.mse_loss(model(x), y)   # no backward: the Minimizer runs it

    for step in range(args.steps):
        loss = optimizer.step(closure)
        print(f"step {step} loss {float(loss):.5f} nfev {optimizer.nfev}")


if __name__ == "__main__":
    main()
