"""Plain torch: a call of the model with gradients before the training loop's first step,
as scripts do at init: a warm-up forward and backward (`--setup warmup`), a sanity-check
forward with gradients whose graph is dropped (`forward`), a probe of the output's
derivative with respect to the input by `torch.autograd.grad` (`probe`), the same through
`torch.func.vjp` (`func`), or a learning-rate finder that takes optimizer steps on the
model and puts its state back (`lrfind`). `--through` makes the setup's call from a lambda
inside a parameterless module (torchdiffeq's `_PerturbFunc` calls a model so).

    python tests/clients/train_grad_in_setup.py --setup warmup --steps 2
    memledger measure tests/clients/train_grad_in_setup.py -p 'checkpoint:*' -- --setup probe

`--batch` is the setup call's batch (the loop's is 8), so a large one puts the run's peak
in setup.
"""

import argparse
import copy

import torch
import torch.nn as nn


class Field(nn.Module):
    """A module of its own, outside the model, that holds a plain function calling it."""

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
    p.add_argument("--setup", default="warmup",
                   choices=["none", "warmup", "forward", "probe", "func", "lrfind"])
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--depth", type=int, default=2)
    p.add_argument("--through", action="store_true",
                   help="make the setup's call through a module outside the model")
    p.add_argument("--look", action="store_true",
                   help="first call the model under no_grad (a shape check) before the setup")
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential(*(Block(args.dim) for _ in range(args.depth)))
    call = Field(lambda x: model(x)) if args.through else model
    optim = torch.optim.SGD(model.parameters(), lr=1e-2)
    xs = torch.randn(args.batch, args.dim)
    if args.look:
        with torch.no_grad():
            print(f"shape check: {tuple(model(xs[:2]).shape)}")
    if args.setup == "warmup":
        call(xs).pow(2).mean().backward()
        optim.zero_grad()
    elif args.setup == "forward":
        print(f"sanity: {call(xs).pow(2).mean().item():.4f}")
    elif args.setup == "probe":
        xs.requires_grad_()
        u = call(xs)
        g = torch.autograd.grad(u.sum(), xs)[0]
        print(f"probe: {g.abs().mean().item():.4f}")
    elif args.setup == "func":
        u, vjp = torch.func.vjp(call, xs)
        print(f"func: {vjp(torch.ones_like(u))[0].abs().mean().item():.4f}")
    elif args.setup == "lrfind":
        state = copy.deepcopy(model.state_dict())
        for lr in (1e-3, 1e-2):
            for g in optim.param_groups:
                g["lr"] = lr
            call(xs).pow(2).mean().backward()
            optim.step()
            optim.zero_grad()
        model.load_state_dict(state)
        for g in optim.param_groups:
            g["lr"] = 1e-2
    for step in range(args.steps):
        x = torch.randn(8, args.dim)
        loss = model(x).pow(2).mean()
        loss.backward()
        optim.step()
        optim.zero_grad()
        print(f"step {step}: loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
