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
Two cases for the last step, whose state no next step reads (Note [The last step's state,
by its holder]): `--states` (the model also hands back every unrolled state, which the
script holds as `states` as for logging: the first, a `tanh` in `cell` of the carried
state's bytes, is held into the next step and read by none), `--grow` (with `--add`: the
carried state keeps its past rows, `tanh(cat(h_prev, x @ W_in))`, a memory that grows by a
batch each unrolled cell, so each step carries other bytes than the step before).
`--residual` (with `--add`): a state no op saves (Note [A state no op saved], memledger/
ledger/carried.py): each cell adds to the state, `h = h_prev + tanh(x @ W_in)`, and the
head reads `tanh(h)`; the `add` that makes the state, the next step's `add` that reads it
and the head's `tanh` save nothing of it (accelerated-scan's reference scan carries its
state so).

    memledger trace tests/clients/train_carried_state.py -o run.ledger --steps 3 -- --add
    memledger show run.ledger     # the carried state reads `other` from its step's end
"""

import argparse

import torch
from torch import nn


class Cell(nn.Module):
    def __init__(self, dim: int, add: bool, grow: bool = False,
                 residual: bool = False) -> None:
        super().__init__()
        self.inp = nn.Linear(dim, dim)
        self.rec = None if add else nn.Linear(dim, dim, bias=False)
        self.grow = grow
        self.residual = residual

    def forward(self, x: torch.Tensor, h: torch.Tensor | None) -> torch.Tensor:
        z = self.inp(x)
        if self.residual:                    # the state's `add` saves nothing of it
            z = torch.tanh(z)
            return z if h is None else h + z
        if h is not None and self.grow:
            z = torch.cat([h, z])            # (rows + batch, dim): the past rows kept
        elif h is not None:
            z = z + (h if self.rec is None else self.rec(h))
        return torch.tanh(z)


class Net(nn.Module):
    def __init__(self, dim: int, add: bool, grow: bool = False,
                 residual: bool = False) -> None:
        super().__init__()
        self.cell = Cell(dim, add, grow, residual)
        self.head = nn.Linear(dim, 1)

    def forward(self, xs: torch.Tensor, h: torch.Tensor | None
                ) -> tuple[torch.Tensor, torch.Tensor, list[torch.Tensor]]:
        states = []
        for x in xs:
            h = self.cell(x, h)
            states.append(h)
        # `--grow`: the head reads the batch's own rows, the last
        if self.cell.residual:            # `tanh` saves its result, not the state
            return self.head(torch.tanh(h)), h, states
        return self.head(h[-len(x):] if self.cell.grow else h), h, states


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--unroll", type=int, default=2)
    ap.add_argument("--add", action="store_true")
    ap.add_argument("--states", action="store_true")
    ap.add_argument("--grow", action="store_true")
    ap.add_argument("--residual", action="store_true")
    args = ap.parse_args()
    torch.manual_seed(0)
    dim, batch = 16, 8
    model = Net(dim, args.add or args.grow or args.residual, args.grow, args.residual)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    h = None                        # the first step starts from no state
    for _ in range(args.steps):
        xs, y = torch.randn(args.unroll, batch, dim), torch.randn(batch, 1)
        # the step before's state, held over this whole step
        carried = None if h is None else h.detach()
        out, h, states = model(xs, carried)
        if not args.states:
            del states              # only the last state is kept
        loss = nn.functional.mse_loss(out, y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
