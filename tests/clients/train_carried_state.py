"""A hidden state the script carries from one step into the next, in plain torch
(tests/clients/test_carried_state.py): what the ledger calls it once the backward that read
its saves has run (Note [A state carried into the next step] in
memledger/ledger/carried.py).

A recurrent cell `h = tanh(x @ W_in + h_prev @ W_h)` (dim 16), unrolled `--unroll` times
per step over a batch of 8 random inputs, a Linear(16, 1) head on the last hidden state,
MSE to random targets, SGD. Each step after the first starts from the step before's last
hidden state, detached (truncated BPTT, as HRM's deep-supervision segments hand theirs
on): the step's graph saved that state (TanhBackward's result, the head's input), its
backward read it, and the script holds it past the step's end into the next step
(`carried`, until the step after rebinds it), whose first matmul reads it under gradients
as a constant: `h_prev @ W_h` saves it again, unless `--add` (the carried state added,
`tanh(x @ W_in + h_prev)`: read, not saved).

    memledger trace tests/clients/train_carried_state.py -o run.ledger --steps 3 -- --add
    memledger show run.ledger     # the carried state reads `other` from its step's end
"""

import argparse

import torch
from torch import nn


class Cell(nn.Module):
    def __init__(self, dim: int, add: bool) -> None:
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.rec = None if add else nn.Linear(dim, dim, bias=False)

    def forward(self, x: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor:
        z = self.inp(x)
        if h is not None:
            z = z + (h if self.rec is None else self.rec(h))
        return torch.tanh(z)


class Net(nn.Module):
    def __init__(self, dim: int, add: bool) -> None:
        super().__init__()
        self.cell = Cell(dim, add)
        self.head = nn.Linear(dim, 1)

    def forward(self, xs: torch.Tensor,
                h: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor]:
        for x in xs:
            h = self.cell(x, h)
        return self.head(h), h


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--unroll", type=int, default=2)
    ap.add_argument("--add", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    dim, batch = 16, 8
    model = Net(dim, args.add)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    h = None                        # the first step starts from no state
    for _ in range(args.steps):
        xs, y = torch.randn(args.unroll, batch, dim), torch.randn(batch, 1)
        # the step before's state, held over this whole step
        carried = None if h is None else h.detach()
        out, h = model(xs, carried)
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
