"""A child the model registers after its first call (Note [A module registered after the
first call], memledger/trace/roots.py), in plain torch.

`--case head`: the model builds its head in its first forward (`if self.head is None:
self.head = nn.Sequential(...)`); a dry run under `no_grad` builds it before the optimizer
is made, as a script sizes a lazy model (every case but `first` and `inner` so too).
`--case first`: the first training step builds it, and the optimizer is made after that
forward; `--case inner`: so, each block building its own `cache` module at its first call.
`--case cache`: after the first step the script gives each block a module of its own
(`set_cache()`, as litgpt's `set_kv_cache` gives each attention its `kv_cache`), which the
block calls from then on; its parameters join the optimizer. `--case throwaway`: the model
makes a module in every forward and registers it nowhere (it stays no module of the
model). SGD, random data, nothing downloaded.

    memledger predict run.ledger -p 'checkpoint:head'
"""

import argparse

import torch
from torch import nn


class Block(nn.Module):
    def __init__(self, width: int, lazy: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(width, width)
        self.cache: nn.Module | None = None
        self.lazy = lazy

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = torch.tanh(self.fc(x))
        if self.lazy and self.cache is None:   # built at the block's first call
            self.cache = nn.Sequential(nn.Linear(h.shape[-1], h.shape[-1]), nn.SiLU())
        if self.cache is not None:
            h = h + self.cache(h)
        return h


class Net(nn.Module):
    def __init__(self, width: int, throwaway: bool = False, lazy: bool = False) -> None:
        super().__init__()
        self.inp = nn.Linear(16, width)
        self.blocks = nn.ModuleList([Block(width, lazy) for _ in range(2)])
        self.head: nn.Module | None = None
        self.width = width
        self.throwaway = throwaway

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.inp(x)
        for b in self.blocks:
            h = b(h)
        if self.throwaway:   # made anew on every call, held by no module
            return nn.Sequential(nn.Linear(self.width, 16), nn.GELU()).to(h)(h)
        if self.head is None:   # built at the first call
            self.head = nn.Sequential(nn.Linear(self.width, self.width), nn.GELU(),
                                      nn.Linear(self.width, 16)).to(h)
        return self.head(h)

    def set_cache(self) -> None:
        for b in self.blocks:
            b.cache = nn.Sequential(nn.Linear(self.width, self.width), nn.SiLU())


def main() -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--case", choices=("head", "first", "cache", "inner", "throwaway"),
                   default="head")
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--width", type=int, default=64)
    p.add_argument("--batch", type=int, default=128)
    args = p.parse_args()
    torch.manual_seed(0)
    model = Net(args.width, throwaway=args.case == "throwaway", lazy=args.case == "inner")
    if args.case not in ("first", "inner"):
        with torch.no_grad():
            model(torch.zeros(1, 16))   # builds the head
    opt = None if args.case in ("first", "inner") else torch.optim.SGD(model.parameters(), lr=1e-2)
    for step in range(args.steps):
        x = torch.randn(args.batch, 16)
        loss = (model(x) - x).pow(2).mean()
        if opt is None:   # the head exists now
            opt = torch.optim.SGD(model.parameters(), lr=1e-2)
        loss.backward()
        opt.step()
        opt.zero_grad()
        if args.case == "cache" and step == 0:
            model.set_cache()
            opt.add_param_group({"params": [p for b in model.blocks
                                            for p in b.cache.parameters()]})


if __name__ == "__main__":
    main()
