"""A recurrent cell whose `.forward()` the model calls directly, as ncps' CfC and LTC run
their cell every time step (`self.rnn_cell.forward(inputs, h_state, ts)`; tests/clients/
train_ncps.py): plain torch, so the mechanism is pinned where ncps is not installed. Adam,
MSE, random sequences.

- `direct`: every time step calls `self.cell.forward(x_t, h)`: no module call of `cell`
  (Note [A forward called directly runs plainly], memledger/measure/apply.py).
- `both`: the encoder's time steps call the cell as a module (`self.cell(x_t, h)`), the
  decoder's call its `.forward()` on the encoder's state, as a seq2seq model sharing one
  cell might.

`--act module` applies the cell's tanh as an `nn.Tanh` module (a parameterless part, as
ncps' CfC cell calls `self.tanh(ff1)`); `--call forward` has the loop call `model.forward(x)`,
as ncps' Lightning example does (`self.model.forward(x)`): no module call of the model
either (Note [Parts called in a forward no hook sees], memledger/trace/collector.py).

    memledger predict run.ledger -p 'checkpoint:cell'
    memledger measure tests/clients/train_direct_call.py -p 'checkpoint:cell' -- --case both
"""

import argparse

import torch
from torch import nn


class Cell(nn.Module):
    """h' = tanh(W [x, h]) gated by a sigmoid of the same input."""

    def __init__(self, inputs: int, hidden: int, act: str) -> None:
        super().__init__()
        self.proj = nn.Linear(inputs + hidden, 2 * hidden)
        self.tanh = nn.Tanh() if act == "module" else torch.tanh

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        z, g = self.proj(torch.cat([x, h], 1)).chunk(2, 1)
        return self.tanh(z) * torch.sigmoid(g) + h * (1 - torch.sigmoid(g))


class Recurrent(nn.Module):
    def __init__(self, inputs: int, hidden: int, outputs: int, case: str, act: str) -> None:
        super().__init__()
        self.case, self.hidden = case, hidden
        self.cell = Cell(inputs, hidden, act)
        self.head = nn.Linear(hidden, outputs)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = x.new_zeros(x.shape[0], self.hidden)
        steps = x.shape[1]
        outs = []
        for t in range(steps):
            if self.case == "both" and t < steps // 2:
                h = self.cell(x[:, t], h)           # the encoder: a module call
            else:
                h = self.cell.forward(x[:, t], h)   # no module hook sees this call
            outs.append(self.head(h))
        return torch.stack(outs, 1)


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="direct", choices=["direct", "both"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--seq", type=int, default=6)
    p.add_argument("--inputs", type=int, default=3)
    p.add_argument("--hidden", type=int, default=16)
    p.add_argument("--act", default="function", choices=["function", "module"])
    p.add_argument("--call", default="module", choices=["module", "forward"])
    args = p.parse_args()
    torch.manual_seed(0)
    gen = torch.Generator().manual_seed(1)
    model = Recurrent(args.inputs, args.hidden, 2, args.case, args.act)
    call = model.forward if args.call == "forward" else model
    opt = torch.optim.Adam(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.inputs, generator=gen)
        y = torch.sin(x.cumsum(1)[..., :2])
        loss = nn.functional.mse_loss(call(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
