"""A running buffer the script keeps from each step's output and hands to the next step's
forward, made outside the forward (tests/clients/test_carried_buffer.py; Notes [A state
the script updates outside the forward] in memledger/ledger/carried.py and [A batch is
what no step made] in memledger/trace/collector.py).

A Linear(16, 16) whose output `z` (batch 8) gets the buffer added (`z + buf`, in the
model's forward), a tanh, a Linear(16, 1) head, MSE to random targets, SGD. The model
hands back `z` too, and the script keeps `buf = buf * 0.5 + z.detach() * 0.5` (512 B),
`--where`:

- `loss`: after the forward, before the backward (the loss phase);
- `update`: after the backward, before the optimizer's step;
- `after`: after the optimizer's step, between two steps.

    memledger trace tests/clients/train_carried_buffer.py -o run.ledger --steps 3 \\
        -- --where loss
    memledger show run.ledger     # the buffer reads `other`, the script's state
"""

import argparse

import torch
from torch import nn


class Net(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.lin = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor, buf: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor]:
        z = self.lin(x)                          # (8, 16)
        if buf is not None:
            z = z + buf                          # the buffer read, not saved
        return self.head(torch.tanh(z)), z


def update(buf: torch.Tensor | None, z: torch.Tensor) -> torch.Tensor:
    """The running buffer: half the old, half the step's `z`."""
    return z.detach() * 0.5 if buf is None else buf * 0.5 + z.detach() * 0.5


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--where", choices=["loss", "update", "after"], default="loss")
    args = ap.parse_args()
    torch.manual_seed(0)
    model = Net(16)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    buf = None
    for _ in range(args.steps):
        x, y = torch.randn(8, 16), torch.randn(8, 1)
        out, z = model(x, buf)
        loss = nn.functional.mse_loss(out, y)
        if args.where == "loss":
            buf = update(buf, z)
        opt.zero_grad()
        loss.backward()
        if args.where == "update":
            buf = update(buf, z)
        opt.step()
        if args.where == "after":
            buf = update(buf, z)


if __name__ == "__main__":
    main()
