"""A memory carried from segment to segment in a list, as infini-transformer-pytorch's
`InfiniTransformerWrapper` carries its compressive memories: the wrapper's forward hands
the model the previous segment's list (`model(x, mems)`), rebinds its variable to the list
the model returns, and then computes the segment's loss itself, no module called. The old
list's memory, saved by the next segment's read (`h * mem`), is held by autograd alone
from that rebinding on; with `--add` (`h + mem`, which saves nothing) it is freed there.
Plain torch, seeded.

    python tests/clients/train_handed_list.py --steps 2
    memledger trace tests/clients/train_handed_list.py --steps 2 -o h.ledger
    memledger compare tests/clients/train_handed_list.py -p 'offload:net.layer'

Note [A handed list let go of between calls] (memledger/trace/collector.py).
"""

import argparse

import torch
import torch.nn as nn


class Layer(nn.Module):
    def __init__(self, d: int, add: bool) -> None:
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.add = add

    def forward(self, x: torch.Tensor, mems: list | None) -> tuple[torch.Tensor, list]:
        h = self.lin(x)
        if mems is not None:                 # saved by the product; `--add`: by nothing
            h = h + mems[0] if self.add else h * mems[0]
        return h, [torch.tanh(h)]            # the next segment's memory (d floats a row)


class Net(nn.Module):
    def __init__(self, d: int, add: bool) -> None:
        super().__init__()
        self.layer = Layer(d, add)

    def forward(self, x: torch.Tensor, mems: list | None) -> tuple[torch.Tensor, list]:
        return self.layer(x, mems)


class Wrapper(nn.Module):
    def __init__(self, d: int, add: bool) -> None:
        super().__init__()
        self.net = Net(d, add)

    def forward(self, xs: list[torch.Tensor]) -> torch.Tensor:
        total, mems = 0., None
        for x in xs:
            out, mems = self.net(x, mems)    # the old list goes here, held by autograd alone
            # the segment's loss in the wrapper's own forward, no module called: its
            # scale a (batch, d, d) fp32 product under no_grad, the step's peak
            with torch.no_grad():
                scale = (out.unsqueeze(-1) * out.unsqueeze(-2)).abs().mean()
            total = total + out.pow(2).mean() / (1 + scale)
        return total


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=2)
    p.add_argument("--dim", type=int, default=16)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--segments", type=int, default=2)
    p.add_argument("--add", action="store_true")
    args = p.parse_args()
    torch.manual_seed(0)
    model = Wrapper(args.dim, args.add)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    for step in range(args.steps):
        xs = [torch.randn(args.batch, args.dim) for _ in range(args.segments)]
        loss = model(xs)
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
