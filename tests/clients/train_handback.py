"""What a module call hands back and what the loop keeps of it, in plain torch: the two
mechanisms pytorch-forecasting's models showed the replay (tests/clients/train_pf.py), and
a save let go of unread under a kept graph (sinkhorn-transformer's, for measure's
offloader), one per `--case`. A loop by hand keeps the model's output (`out = model(x)`) until the next
step's forward has run, as train_pf.py's `--loop hand` does. Adam, random data.

- `weights`: a variable selection network as TFT's (`select`): a GELU projection of each
  variable, softmax weights over the variables from it, their weighted sum; the call
  returns `(outputs, weights)` and the model puts the weights in its output dict, read by
  nothing after (Note [What a call hands back], memledger/replay/engine.py).
- `backcast`: N-BEATS-like blocks (`blocks.*`): a ReLU hidden state read by two Linear
  heads, backcast and forecast; the residual takes each block's backcast off its input,
  the forecasts add up, the loss reads the forecast only, so backward never reaches the
  last block's backcast head, whose save of the ReLU output is never unpacked while `out`
  holds it (Note [A save backward never reads], memledger/replay/engine.py).
- `unread`: blocks (`blocks.*`) whose tanh hidden state is read by their output Linear
  and, once more, by a hard pick of its largest unit (`h.abs().argmax(-1)`, an index: the
  abs node that saved `h` dies unread as the forward drops its output, as
  sinkhorn-transformer's sort-net mask picks do); the loop runs `loss.backward(
  retain_graph=True)` and keeps `loss` to the next step, so the graph's nodes, and the
  saves backward read, live through the optimizer step (Note [A save let go of unread,
  for the offloader], memledger/measure/offload.py).
- `shared`: a memory carried from step to step, as memformer's (tests/clients/
  train_memformer_mlm.py): the step's memory `m` (the carried one plus the batch) is read
  by `read` (the prediction's path) and by `update` (the next memory's), and the next
  memory is `update(m) * m`, so a node outside both saves `m` too; the loss reads the
  prediction only, so backward never unpacks `update`'s save or the product's, and the
  loop keeps `out` (the next memory's graph) to the next step's forward (Note [A save
  backward never reads, of a storage that stays], memledger/replay/engine.py).

    memledger compare tests/clients/train_handback.py --steps 2 \
        -p 'checkpoint:select' -- --case weights
    memledger compare tests/clients/train_handback.py --steps 2 \
        -p 'offload:blocks.*' -- --case backcast
    memledger compare tests/clients/train_handback.py --steps 2 \
        -p 'offload:blocks.*' -- --case unread
    memledger compare tests/clients/train_handback.py --steps 2 \
        -p 'offload:read+offload:update' -- --case shared
"""

import argparse

import torch
from torch import nn


class Select(nn.Module):
    """TFT's variable selection, cut down: (B, V, D) -> (B, H) and (B, V) weights."""

    def __init__(self, n_vars: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, hidden)
        self.flat = nn.Linear(n_vars * hidden, n_vars)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = nn.functional.gelu(self.proj(x))                       # (B, V, H)
        weights = torch.softmax(self.flat(h.flatten(1)), dim=-1)   # (B, V)
        return (h * weights.unsqueeze(-1)).sum(1), weights


class WeightsNet(nn.Module):
    def __init__(self, n_vars: int, dim: int, hidden: int) -> None:
        super().__init__()
        self.select = Select(n_vars, dim, hidden)
        self.head = nn.Linear(hidden, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        h, weights = self.select(x)
        return {"prediction": self.head(h), "weights": weights}


class Block(nn.Module):
    """N-BEATS' block, cut down: a ReLU hidden state, a backcast and a forecast head."""

    def __init__(self, length: int, horizon: int, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(length, hidden)
        self.backcast = nn.Linear(hidden, length)
        self.forecast = nn.Linear(hidden, horizon)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.relu(self.fc(x))
        return self.backcast(h), self.forecast(h)


class BackcastNet(nn.Module):
    def __init__(self, length: int, horizon: int, hidden: int, n_blocks: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Block(length, horizon, hidden) for _ in range(n_blocks))

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        residual, forecast = x, 0
        for block in self.blocks:
            b, f = block(residual)
            residual, forecast = residual - b, forecast + f
        return {"prediction": forecast, "backcast": x - residual}


class Picker(nn.Module):
    """A tanh hidden state, its output projection, and the index of its largest unit."""

    def __init__(self, dim: int, hidden: int) -> None:
        super().__init__()
        self.fc = nn.Linear(dim, hidden)
        self.out = nn.Linear(hidden, dim)

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = torch.tanh(self.fc(x))
        pick = h.abs().argmax(-1)   # abs saves `h`; its node dies with its output, unread
        return self.out(h), pick


class UnreadNet(nn.Module):
    def __init__(self, dim: int, hidden: int, n_blocks: int = 2) -> None:
        super().__init__()
        self.blocks = nn.ModuleList(Picker(dim, hidden) for _ in range(n_blocks))
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> dict[str, torch.Tensor]:
        picks = []
        for block in self.blocks:
            h, pick = block(x)
            x, picks = x + h, picks + [pick]
        return {"prediction": self.head(x), "picks": torch.stack(picks, 1)}


class SharedNet(nn.Module):
    """A memory read by two modules and by a product outside them."""

    def __init__(self, dim: int) -> None:
        super().__init__()
        self.read = nn.Linear(dim, dim)
        self.update = nn.Linear(dim, dim)
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor, memory: torch.Tensor) -> dict[str, torch.Tensor]:
        m = memory + x                           # (B, D), saved by read, update and the mul
        return {"prediction": self.head(torch.relu(self.read(m))),
                "memory": self.update(m) * m}    # its graph never reached by backward


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", default="weights", choices=["weights", "backcast", "unread",
                                                         "shared"])
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--batch", type=int, default=8)
    p.add_argument("--hidden", type=int, default=32)
    args = p.parse_args()
    torch.manual_seed(0)
    if args.case == "weights":
        model, shape, target = WeightsNet(4, 8, args.hidden), (args.batch, 4, 8), (args.batch, 1)
    elif args.case == "backcast":
        model, shape, target = BackcastNet(24, 4, args.hidden), (args.batch, 24), (args.batch, 4)
    elif args.case == "unread":
        model, shape, target = UnreadNet(16, args.hidden), (args.batch, 16), (args.batch, 1)
    else:
        model, shape, target = SharedNet(args.hidden), (args.batch, args.hidden), (args.batch, 1)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    memory = torch.zeros(shape) if args.case == "shared" else None
    for _ in range(args.steps):
        x, y = torch.randn(shape), torch.randn(target)
        if args.case == "shared":
            out = model(x, memory)
            memory = out["memory"].detach()   # carried, cut from its graph
        else:
            out = model(x)             # kept until the next step's forward has run
        loss = (out["prediction"] - y).pow(2).mean()
        optimizer.zero_grad()
        # `unread`: the graph kept (its nodes and their saves) until `loss` is rebound
        loss.backward(retain_graph=args.case == "unread")
        optimizer.step()


if __name__ == "__main__":
    main()
