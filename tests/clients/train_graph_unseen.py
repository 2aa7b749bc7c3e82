"""A part called three times a step, as pypose's EKF calls its observation model at each
filter step: once for a reference point whose graph no backward runs (dropped when the
forward returns, or kept on the module until the next step's with `--keep`), once inside
`torch.autograd.functional.jacobian` (its vmapped backward reads it there) and once on
the loss's path. Its saves are its argument and its parameters, so the trace cannot see
the dropped graph die (Note [A graph dropped unseen], replay/engine.py).

    memledger predict ... -p checkpoint:g     # each call's frame and RNG state
"""
import argparse

import torch
from torch import nn
from torch.autograd.functional import jacobian


class Filter(nn.Module):
    def __init__(self, n: int, keep: bool) -> None:
        super().__init__()
        self.g = nn.Linear(n, n)
        self.keep = keep

    def forward(self, x):
        ref = self.g(x)                       # the reference point: no backward reads it
        if self.keep:
            self.ref = ref                    # held by the module until the next call
        C = jacobian(lambda z: self.g(z), x, vectorize=True)   # (n, n), no graph
        return C @ self.g(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--frames", type=int, default=2)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--keep", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Filter(args.n, args.keep)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for _ in range(args.steps):
        x = torch.randn(args.n)
        loss = 0
        for _ in range(args.frames):
            x = model(x)
            loss = loss + x.square().sum()
        loss.backward()
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
