"""A block whose last save is made inside a `torch.jit.script` function, in plain torch:
the shape of assoc-scan's `AssocScan` (its combine `binary_operator` is scripted and its
`addcmul` is the scan's last save), trained as a gated linear recurrence (a Hillis-Steele
scan over time, each level one call of the scripted combine).

    memledger compare tests/clients/train_scripted_stop.py -p 'checkpoint:blocks.0.scan'

`--tail` adds a Linear after the scan inside the scan module (the region's last save then
in Python), `--layers`, `--seq`, `--dim`, `--batch`.
"""

import argparse

import torch
import torch.nn as nn


@torch.jit.script
def combine(a_i: torch.Tensor, x_i: torch.Tensor, a_j: torch.Tensor, x_j: torch.Tensor):
    return a_j * a_i, torch.addcmul(x_j, a_j, x_i)


class Scan(nn.Module):
    """x_t = a_t x_{t-1} + b_t over dim 1, by log2(T) levels of `combine`."""

    def __init__(self, dim: int, tail: bool) -> None:
        super().__init__()
        self.tail = nn.Linear(dim, dim) if tail else None

    def forward(self, a: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
        step = 1
        while step < x.shape[1]:
            na, nx = combine(a[:, :-step], x[:, :-step], a[:, step:], x[:, step:])
            a = torch.cat([a[:, :step], na], 1)
            x = torch.cat([x[:, :step], nx], 1)
            step *= 2
        return self.tail(x) if self.tail is not None else x


class Block(nn.Module):
    def __init__(self, dim: int, tail: bool) -> None:
        super().__init__()
        self.proj = nn.Linear(dim, 2 * dim)
        self.scan = Scan(dim, tail)
        self.out = nn.Linear(dim, dim)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        g, v = self.proj(h).chunk(2, -1)
        z = g.sigmoid()
        return h + self.out(self.scan(1 - z, z * v))


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--tail", action="store_true")
    p.add_argument("--layers", type=int, default=2)
    p.add_argument("--seq", type=int, default=16)
    p.add_argument("--dim", type=int, default=8)
    p.add_argument("--batch", type=int, default=2)
    args = p.parse_args()
    torch.manual_seed(0)
    model = nn.Sequential()
    model.blocks = nn.Sequential(*(Block(args.dim, args.tail) for _ in range(args.layers)))
    opt = torch.optim.Adam(model.parameters(), lr=1e-3)
    for step in range(args.steps):
        x = torch.randn(args.batch, args.seq, args.dim)
        loss = model(x).square().mean()
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"step {step}  loss {loss.item():.4f}")


if __name__ == "__main__":
    main()
