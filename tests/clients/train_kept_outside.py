"""A storage saved by an offloaded call and by a node outside it, in a graph the script keeps
past its backward (`retain_graph=True`, the loss held to the next step), in plain torch: a
Linear and a GELU make `h`; `inner` (a Linear, the region a policy offloads) saves `h` as
its input, and a gate outside it (`h * self.gate`) saves `h` too; the sum's backward keeps
the graph, and Adam's step, with its states made in the first step, runs while it lives.

    memledger predict/measure -p 'offload:inner' ... -- --steps 2

Offloaded, `inner`'s save holds a copy on disk, the gate's node the original: autograd lets
go of it when the kept graph goes, not as that node returns (Note [An outside node a kept
graph holds on], replay/engine.py). As memformer trains with `--mode bptt --carry keep`.
"""

import argparse

import torch
import torch.nn as nn


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, 4 * dim)
        self.act = nn.GELU()
        self.inner = nn.Linear(4 * dim, 4 * dim)
        self.gate = nn.Parameter(torch.ones(4 * dim))
        self.head = nn.Linear(4 * dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.act(self.fc(x))
        return self.head(self.inner(h) + h * self.gate)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--dim", type=int, default=16)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.dim)
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss = None
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.dim)
        loss = model(x).pow(2).mean()
        loss.backward(retain_graph=True)
        opt.step()
        opt.zero_grad()


if __name__ == "__main__":
    main()
