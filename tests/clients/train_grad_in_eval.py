"""Plain torch: an evaluation under `torch.no_grad()` that turns gradients back on to take
a derivative of the model's output with respect to its input (`torch.autograd.grad`), as
flow_matching's `ODESolver.compute_likelihood` takes the velocity's divergence.

    python tests/clients/train_grad_in_eval.py --steps 3 --through
    memledger compare tests/clients/train_grad_in_eval.py -p 'checkpoint:*' -- --through

`--eval hutchinson` (the default: one `autograd.grad` of a random projection), `exact`
(two `autograd.grad(..., create_graph=True)`), `forward` (a graph no backward reads: the
doctor's `unused_graph`), `none`; `--through` calls the model from a lambda inside a
parameterless module, as torchdiffeq's `_PerturbFunc` calls flow_matching's velocity, so
the evaluation's calls are no top-level call of the model and read phase "other";
`--eval-mode` runs the evaluation in eval mode.
"""

import argparse

import torch
import torch.nn as nn


class Field(nn.Module):
    """What an ODE solver hands its function (torchdiffeq's `_PerturbFunc` around the
    solver's closure): a module of its own, outside the model the optimizer trains, that
    holds a plain function which calls the model."""

    def __init__(self, fn):
        super().__init__()
        self.fn = fn

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.fn(x)


class Block(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        return h + self.fc2(torch.tanh(self.fc1(h)))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--eval", default="hutchinson",
                   choices=["none", "hutchinson", "exact", "forward"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--eval-mode", action="store_true")
    p.add_argument("--through", action="store_true",
                   help="call the model through a module outside it in the evaluation")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(args.dim) for _ in range(args.depth)))
    field = Field(lambda x: model(x)) if args.through else model
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x = torch.randn(8, args.dim)
        loss = model(x).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        if args.eval == "none":
            continue
        model.train(not args.eval_mode)
        with torch.no_grad():
            xt = torch.randn(args.batch, args.dim)
            with torch.enable_grad():
                xt.requires_grad_()
                u = field(xt)
                if args.eval == "forward":   # a graph no backward reads (a loop bug)
                    div = u.detach().sum(-1)
                elif args.eval == "hutchinson":
                    z = torch.randn_like(u)
                    g = torch.autograd.grad((u * z).sum(), xt)[0]
                    div = (g * z).sum(-1)
                else:
                    div = 0
                    for i in range(2):
                        div = div + torch.autograd.grad(u[:, i].sum(), xt,
                                                        create_graph=True)[0][:, i]
            print(f"step {step}: div {div.mean().item():.4f}")
        model.train()


if __name__ == "__main__":
    main()
