"""A forward that takes a Jacobian of its own part, as pypose's EKF linearizes its system
inside each filter step: `torch.autograd.functional.jacobian` runs a backward pass (vmapped)
inside the module's forward, over a graph of its own. The part `g` is called inside it and
again on the loss's path; `--ref drop` also calls it once more for a reference point whose
graph goes when the forward returns, `--ref keep` keeps that output and the state it was
taken at on the module until the next call (the EKF's `_ref_g`, `_ref_state`).

    memledger predict ... -p offload:g    # Note [A pass inside the forward], trace/collector.py
"""
import argparse

import torch
from torch import nn
from torch.autograd.functional import jacobian


class Filter(nn.Module):
    def __init__(self, n: int, ref: str) -> None:
        super().__init__()
        self.g = nn.Linear(n, n)
        self.ref = ref

    def forward(self, x):
        if self.ref != "none":
            out = self.g(x)                   # the reference point: no backward reads it
            if self.ref == "keep":
                self.ref_out, self.ref_state = out, x   # held until the next call
        C = jacobian(lambda z: self.g(z), x, vectorize=True)   # (n, n), no graph
        return C @ self.g(x)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--frames", type=int, default=3)
    p.add_argument("--n", type=int, default=4)
    p.add_argument("--ref", choices=["none", "drop", "keep"], default="none")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Filter(args.n, args.ref)
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
