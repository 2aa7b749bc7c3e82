"""Which blocks `plan` searches, in plain torch: a block's saves are counted as the replay
counts them (Rule 5 of replay/engine.py: a save is recorded one event before the op that
saves its input), one `--case` each. SGD, random data.

- `rank`: two numbered groups of different classes at different depths (no stack of one
  another, Note [Stacks beside the blocks]), called in turn: `downs.{i}` (`Down`, a
  Linear from wide to narrow, which saves its wide input, recorded one event before its
  call) and `tower.ups.{i}` (`Up`, a Linear from narrow to wide, which saves its narrow
  input; its wide output is saved by the next `Down`, or the head, one event before their
  calls, the last event of its own). Read on a call's own events, `downs.*` saved nothing
  and `tower.ups.*` every wide tensor (Note [A block's saves, by its calls],
  memledger/replay/plan.py).
- `identity`: `blocks.{i}`, two MLP blocks and an `nn.Identity` (a stage that runs no op,
  as MEGABYTE-pytorch's last `to_next_transformer_projections`), left out of the search.
- `sequential`: the model is itself an `nn.Sequential` (a Linear, two stages of two MLP
  blocks each, a LayerNorm, a Linear head), as mlp-mixer-pytorch's `MLPMixer`: its blocks
  are the top-level `1`, `2` (Note [A model that is itself a Sequential]).

    memledger plan tests/clients/train_plan_saves.py --budget 60% -- --case rank
"""

import argparse

import torch
from torch import nn


class Down(nn.Module):
    """wide -> narrow by one matmul: its first op saves its input (no `t` op before it)."""

    def __init__(self, wide: int, narrow: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(wide, narrow) / wide ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


class Up(nn.Module):
    """narrow -> wide, likewise."""

    def __init__(self, narrow: int, wide: int) -> None:
        super().__init__()
        self.w = nn.Parameter(torch.randn(narrow, wide) / narrow ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x @ self.w


class Tower(nn.Module):
    def __init__(self, narrow: int, wide: int, n: int) -> None:
        super().__init__()
        self.ups = nn.ModuleList(Up(narrow, wide) for _ in range(n))


class RankNet(nn.Module):
    def __init__(self, wide: int, narrow: int, n: int) -> None:
        super().__init__()
        self.stem = nn.Linear(narrow, wide)
        self.downs = nn.ModuleList(Down(wide, narrow) for _ in range(n))
        self.tower = Tower(narrow, wide, n)
        self.head = nn.Parameter(torch.randn(wide, 1) / wide ** 0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.stem(x)
        for down, up in zip(self.downs, self.tower.ups):
            x = up(torch.tanh(down(x)))
        return x @ self.head


class Block(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(dim, 4 * dim), nn.Linear(4 * dim, dim)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.fc2(torch.relu(self.fc1(x)))


class IdentityNet(nn.Module):
    def __init__(self, dim: int) -> None:
        super().__init__()
        self.blocks = nn.ModuleList([Block(dim), Block(dim), nn.Identity()])
        self.head = nn.Linear(dim, 1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for block in self.blocks:
            x = block(x)
        return self.head(x)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--case", choices=("rank", "identity", "sequential"), default="rank")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--wide", type=int, default=256)
    ap.add_argument("--narrow", type=int, default=8)
    ap.add_argument("--blocks", type=int, default=3)
    args = ap.parse_args()
    torch.manual_seed(0)
    if args.case == "rank":
        model = RankNet(args.wide, args.narrow, args.blocks)
        dim = args.narrow
    elif args.case == "identity":
        model = IdentityNet(args.narrow)
        dim = args.narrow
    else:
        dim = args.narrow
        model = nn.Sequential(nn.Linear(dim, dim),
                              *[nn.Sequential(Block(dim), Block(dim)) for _ in range(2)],
                              nn.LayerNorm(dim), nn.Linear(dim, 1))
    opt = torch.optim.SGD(model.parameters(), lr=1e-2)
    for _ in range(args.steps):
        x, y = torch.randn(args.batch, dim), torch.randn(args.batch, 1)
        loss = nn.functional.mse_loss(model(x), y)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()


if __name__ == "__main__":
    main()
